package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// TestLedgerFailureDetail: a failed action is recorded as failed whatever
// its error says. The detail column is text: an error message cut at byte
// 1000 inside a multi-byte character, or one holding a NUL byte, is not
// valid text for Postgres (or MySQL's utf8mb4), and the row must still be
// marked failed, not left "started" for a later holder to reclaim and run
// the action again.
func TestLedgerFailureDetail(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		for _, tc := range []struct{ name, msg string }{
			{"cut-rune", strings.Repeat("a", 999) + "é and more"},
			{"nul", "gateway said \x00 then hung up"},
			{"invalid-utf8", "gateway said \xff\xfe"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h, l, _ := newLedger(t, db)
				ctx := context.Background()
				boom := errors.New(tc.msg)
				ran, err := l.Once(ctx, h, "pay:1", 1, func(context.Context) error { return boom })
				if !ran || !errors.Is(err, boom) || err.Error() != boom.Error() {
					t.Errorf("Once with a failing action: ran %v, %v; want ran, exactly the action's error", ran, err)
				}
				if st, err := l.State(ctx, h, "pay:1"); st != fencing.LedgerFailed {
					t.Errorf("state %q (%v), want %q", st, err, fencing.LedgerFailed)
				}
			})
		}
	})
}
