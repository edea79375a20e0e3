package dblock_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/dblock"
	"github.com/fencehq/fence/internal/dbtest"
)

// TestInSessionFnClosesConn: fn must not close conn, but if it does, the
// connection goes back to database/sql's pool with the session's locks
// still held, and no one can take them until that pooled connection
// happens to close. InSession must report the misuse and end the server
// session, which releases the locks.
func TestInSessionFnClosesConn(t *testing.T) {
	for _, tc := range []struct {
		name string
		db   dbtest.DB
		o    dblock.Options
		free func(h *sql.DB, name string) bool
	}{
		{"postgres", dbtest.Postgres(), dblock.Options{}, func(h *sql.DB, name string) bool { return heldBy(t, h, true, name) == 0 }},
		{"mysql", dbtest.MySQL(), dblock.Options{Dialect: fencing.MySQL}, func(h *sql.DB, name string) bool {
			var free int
			if err := h.QueryRow("SELECT IS_FREE_LOCK(?)", fmt.Sprintf("dblock_%016x", uint64(dblock.Key(name)))).Scan(&free); err != nil {
				t.Fatal(err)
			}
			return free == 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := dbtest.Open(t, tc.db)
			h.SetMaxIdleConns(4) // the closed connection stays pooled, as in any service
			probe := dbtest.Open(t, tc.db)
			ctx := testCtx(t)
			names := unique(t, "job")
			err := dblock.InSession(ctx, h, tc.o, names, func(conn *sql.Conn) error { return conn.Close() })
			if !errors.Is(err, sql.ErrConnDone) {
				t.Errorf("InSession whose fn closed conn: %v, want an error matching sql.ErrConnDone", err)
			}
			waitFor(ctx, t, "the lock taken on the connection fn closed is released", func() bool { return tc.free(probe, names[0]) })
		})
	}
}
