package dblock_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fencehq/fence/fencing/dblock"
	"github.com/fencehq/fence/internal/dbtest"
)

// pgbouncer starts PgBouncer (Debian's package, if installed; the test is
// skipped otherwise, or fails with FENCE_REQUIRE_PGBOUNCER=1 as in CI) in front of this machine's Postgres in transaction
// pooling mode, and returns a database/sql handle through it.
func pgbouncer(t *testing.T, roundRobin bool) *sql.DB {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/pgbouncer"); err != nil {
			if os.Getenv("FENCE_REQUIRE_PGBOUNCER") == "1" {
				t.Fatal("pgbouncer is not installed and FENCE_REQUIRE_PGBOUNCER=1 (apt-get install pgbouncer)")
			}
			t.Skip("pgbouncer is not installed (apt-get install pgbouncer; set FENCE_REQUIRE_PGBOUNCER=1 to fail instead)")
		}
	}
	dbtest.Open(t, dbtest.Postgres()) // started, reachable
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	rr := 0
	if roundRobin {
		rr = 1
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	ini := filepath.Join(dir, "pgbouncer.ini")
	conf := fmt.Sprintf(`[databases]
test = host=127.0.0.1 port=5432 dbname=test user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
server_round_robin = %d
default_pool_size = 4
`, port, rr)
	if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{ini}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres"}, args...) // it will not run as root
	}
	cmd := exec.Command(bin, args...)
	var log bytes.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		if t.Failed() {
			t.Logf("pgbouncer:\n%s", log.Bytes())
		}
	})
	// Simple protocol: PgBouncer 1.18 keeps no prepared statements across
	// transactions.
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable&default_query_exec_mode=simple_protocol", port)
	h, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctx := testCtx(t)
	waitFor(ctx, t, "pgbouncer answers", func() bool { return h.PingContext(ctx) == nil })
	return h
}

// TestPgBouncerTransactionPooling: through PgBouncer in transaction mode,
// InTx works (a transaction keeps its server connection), and InSession
// fails with ErrPooled, ending the server process left holding the lock:
// right after locking when the next statement lands on another server
// connection (server_round_robin = 1, two server connections open), or,
// with PgBouncer's default (LIFO: the same server connection again, so the
// first check passes), at the unlock, once another client has taken that
// server connection meanwhile. Until then the lock was held as if in a
// session of its own: by luck, not by design.
func TestPgBouncerTransactionPooling(t *testing.T) {
	direct := dbtest.Open(t, dbtest.Postgres())
	for _, rr := range []bool{true, false} {
		t.Run(fmt.Sprint("round_robin=", rr), func(t *testing.T) {
			h := pgbouncer(t, rr)
			ctx := testCtx(t)
			names := unique(t, "job")
			if err := dblock.InTx(ctx, h, dblock.Options{}, names, func(*sql.Tx) error {
				if n := heldBy(t, direct, true, names...); n != 1 {
					t.Errorf("InTx through PgBouncer: %d locks held", n)
				}
				return nil
			}); err != nil {
				t.Fatalf("InTx through PgBouncer: %v", err)
			}
			// Open two server connections: two transactions at once.
			t1, err := h.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t2, err := h.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tx := range []*sql.Tx{t1, t2} {
				if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
			}
			t1.Commit()
			t2.Commit()
			called := false
			var other *sql.Tx
			err = dblock.InSession(ctx, h, dblock.Options{}, names, func(*sql.Conn) error {
				called = true
				if rr {
					return nil
				}
				// LIFO: the check after locking passed (the same server
				// connection again). Another client's transaction now takes
				// that server connection, so the unlock lands elsewhere.
				var err error
				if other, err = h.BeginTx(ctx, nil); err != nil {
					return err
				}
				_, err = other.ExecContext(ctx, "SELECT 1")
				return err // other stays open through the unlock
			})
			if other != nil {
				t.Logf("the other client's transaction, on the ended server process: %v", other.Rollback())
			}
			t.Logf("InSession through PgBouncer (server_round_robin=%v): %v", rr, err)
			if !errors.Is(err, dblock.ErrPooled) || called == rr {
				t.Errorf("InSession: %v (fn called %v), want ErrPooled", err, called)
			}
			// The server process that took the lock was ended, and the lock with it.
			waitFor(ctx, t, "the pooled lock is released", func() bool { return heldBy(t, direct, true, names...) == 0 })
		})
	}
}
