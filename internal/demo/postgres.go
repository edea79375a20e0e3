//go:build !fence_slim

package demo

// The Postgres driver the story uses with a DSN. A slim build (-tags
// fence_slim: make dist, the Dockerfile) leaves it out, and with it about
// 4.5 MB of the binary a server runs; Run then refuses a DSN.
import _ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
