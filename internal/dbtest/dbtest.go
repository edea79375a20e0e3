// Package dbtest gives tests real databases: PostgreSQL, MariaDB/MySQL and
// Redis on this machine (started if they are down) and SQLite in a temp file.
//
// A test that cannot reach its database is skipped, unless FENCE_REQUIRE_DB=1
// (CI), when it fails. DSNs can be overridden with FENCE_TEST_POSTGRES_DSN
// and FENCE_TEST_MYSQL_DSN, Redis's address with FENCE_TEST_REDIS_ADDR.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/fencehq/fence/fencing"
)

// DB is one database under test.
type DB struct {
	Name    string // postgres, mysql, sqlite
	Dialect *fencing.Dialect
	Driver  string
	DSN     string
}

// Postgres, MySQL and SQLite describe the databases of this machine.
func Postgres() DB {
	return DB{"postgres", fencing.Postgres, "pgx", env("FENCE_TEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")}
}

// MySQL is MariaDB on this machine.
func MySQL() DB {
	return DB{"mysql", fencing.MySQL, "mysql", env("FENCE_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true")}
}

// MySQLFoundRows is MySQL with clientFoundRows=true in its DSN: its
// connections count the rows a statement finds, not the ones it changes
// (an INSERT … ON DUPLICATE KEY UPDATE that leaves a row alone counts 1,
// as a new row does).
func MySQLFoundRows() DB {
	db := MySQL()
	sep := "?"
	if strings.Contains(db.DSN, "?") {
		sep = "&"
	}
	db.DSN += sep + "clientFoundRows=true"
	return db
}

// SQLite is a fresh file in the test's temp dir, with a busy timeout so
// concurrent writers wait instead of failing.
func SQLite(t testing.TB) DB {
	path := filepath.Join(t.TempDir(), "test.db")
	return DB{"sqlite", fencing.SQLite, "sqlite", "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)"}
}

// All returns the three databases.
func All(t testing.TB) []DB { return []DB{Postgres(), MySQL(), SQLite(t)} }

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var starts sync.Map // name → *sync.Once

// startCommands start the local services the way this machine's docs say.
var startCommands = map[string][]string{
	"postgres": {"sh", "-c", "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"},
	"mysql":    {"start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd"},
}

// Open connects to db (starting the local service if it is down) and closes
// the handle when the test ends.
func Open(t testing.TB, db DB) *sql.DB {
	t.Helper()
	h, err := Connect(db, t.Logf)
	if err != nil {
		unreachable(t, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// unreachable skips the test, or fails it with FENCE_REQUIRE_DB=1 (CI).
func unreachable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("FENCE_REQUIRE_DB") == "1" {
		t.Fatal(err.Error() + " (FENCE_REQUIRE_DB=1)")
	}
	t.Skip(err.Error())
}

// Connect connects to db, starting the local service if it is down (logf
// hears how that went), and waits up to 30s for it to answer.
func Connect(db DB, logf func(format string, args ...any)) (*sql.DB, error) {
	h, err := sql.Open(db.Driver, db.DSN)
	if err != nil {
		return nil, err
	}
	if err := ping(h, 2*time.Second); err == nil {
		return h, nil
	}
	if args, ok := startCommands[db.Name]; ok {
		once, _ := starts.LoadOrStore(db.Name, &sync.Once{})
		once.(*sync.Once).Do(func() {
			out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
			logf("starting %s: %v %s", db.Name, err, out)
		})
	}
	if err := ping(h, 30*time.Second); err != nil {
		h.Close()
		return nil, fmt.Errorf("%s not reachable at %s: %v", db.Name, db.DSN, err)
	}
	return h, nil
}

func ping(h *sql.DB, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := h.PingContext(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Table returns a fresh table name; when the test ends it drops that table
// and the companions name_<suffix> for each suffix given.
func Table(t testing.TB, h *sql.DB, suffixes ...string) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "fence_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		h.Exec("DROP TABLE IF EXISTS " + name)
		for _, s := range suffixes {
			h.Exec("DROP TABLE IF EXISTS " + name + "_" + s)
		}
	})
	return name
}
