package fencing_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// TestLedgerOnce: 20 concurrent attempts at one action; it runs exactly once.
func TestLedgerOnce(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h := dbtest.Open(t, db)
		name := dbtest.Table(t, h)
		ctx := context.Background()
		l, err := fencing.NewLedger(db.Dialect, name)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := l.EnsureTable(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		var sent atomic.Int32
		var ranCount atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ran, err := l.Once(ctx, h, "sms:order-77:shipped", fencing.Token(i+1), func(context.Context) error {
					sent.Add(1)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				if ran {
					ranCount.Add(1)
				}
			}()
		}
		wg.Wait()
		if sent.Load() != 1 || ranCount.Load() != 1 {
			t.Fatalf("action ran %d times (reported %d)", sent.Load(), ranCount.Load())
		}
		if st, _ := l.State(ctx, h, "sms:order-77:shipped"); st != fencing.LedgerDone {
			t.Fatalf("state %q", st)
		}
		// A failed action stays recorded (it may have happened); Forget allows a retry.
		boom := errors.New("gateway timeout")
		if ran, err := l.Once(ctx, h, "pay:77", 1, func(context.Context) error { return boom }); !ran || !errors.Is(err, boom) {
			t.Fatalf("failing action: %v %v", ran, err)
		}
		if ran, _ := l.Once(ctx, h, "pay:77", 2, func(context.Context) error { return nil }); ran {
			t.Fatal("a failed action ran again without Forget")
		}
		if st, _ := l.State(ctx, h, "pay:77"); st != fencing.LedgerFailed {
			t.Fatalf("state %q", st)
		}
		if err := l.Forget(ctx, h, "pay:77"); err != nil {
			t.Fatal(err)
		}
		if ran, err := l.Once(ctx, h, "pay:77", 3, func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("after Forget: %v %v", ran, err)
		}
	})
}
