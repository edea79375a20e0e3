package pglease_test

import (
	"testing"

	"github.com/fencehq/fence/internal/deptest"
)

// TestDeps keeps pglease small: a program that only wants the Postgres
// lease gets database/sql, the standard library and two internal packages.
func TestDeps(t *testing.T) {
	const driver = "the caller opens the *sql.DB with the driver of its choice"
	deptest.Check(t, "github.com/fencehq/fence/client/pglease", map[string]string{
		"github.com/jackc/":                  driver,
		"github.com/lib/pq":                  driver,
		"github.com/go-sql-driver/":          driver,
		"modernc.org/":                       driver,
		"github.com/redis/":                  "no Redis here",
		"google.golang.org/grpc":             "no fence server, no gRPC",
		"google.golang.org/protobuf":         "no fence server, no protobuf",
		"github.com/fencehq/fence/api":       "no fence server",
		"github.com/fencehq/fence/client":    "fence's gRPC client is not needed",
		"go.etcd.io/":                        "the server side",
		"github.com/prometheus/":             "metrics are the caller's",
		"github.com/fencehq/fence/internal/": "internals stay internal, but for the two allowed",
		"testing":                            "production code never imports testing",
	}, map[string]string{
		"github.com/fencehq/fence/internal/clock": "CLOCK_BOOTTIME deadlines; standard library and x/sys only",
		"github.com/fencehq/fence/internal/hold":  "the safety margin rule, the lease context, the Keeper; standard library and internal/clock only",
	})
}
