package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// TestLedgerOnce: 20 concurrent attempts at one action; it runs exactly once.
func TestLedgerOnce(t *testing.T) {
	forEachDBAndFoundRows(t, func(t *testing.T, db dbtest.DB) {
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
				if err != nil && (ran || !errors.Is(err, fencing.ErrStale)) {
					t.Error(ran, err) // a lower token than the claimant's is refused as stale
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

// newLedger returns a ledger in a fresh table on db, and its handle.
func newLedger(t *testing.T, db dbtest.DB) (*sql.DB, *fencing.Ledger, string) {
	t.Helper()
	h := dbtest.Open(t, db)
	name := dbtest.Table(t, h)
	l, err := fencing.NewLedger(db.Dialect, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureTable(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	return h, l, name
}

// TestLedgerClaims: what a claim with token 5 does to each kind of row.
func TestLedgerClaims(t *testing.T) {
	forEachDBAndFoundRows(t, func(t *testing.T, db dbtest.DB) {
		h, l, name := newLedger(t, db)
		ctx := context.Background()
		now := time.Now().UnixMicro() // the database runs on this machine: one clock
		for _, tc := range []struct {
			name         string
			reclaimAfter time.Duration
			token        int64  // the row before the claim: 0 for none
			state        string //
			startedAt    int64  // µs since 1970, by the database's clock
			ran          bool
			stale        fencing.Token // the StaleError's Highest, 0 for no error
			after        string        // "token state" afterwards
		}{
			{"fresh key", 0, 0, "", 0, true, 0, "5 done"},
			{"lower than a done claim", 0, 7, "done", now, false, 7, "7 done"},
			{"lower than a failed claim", 0, 7, "failed", now, false, 7, "7 failed"},
			{"lower than a running claim", 0, 7, "started", now, false, 7, "7 started"},
			{"lower than a stuck claim", 0, 7, "started", 0, false, 7, "7 started"},
			{"equal, done", 0, 5, "done", now, false, 0, "5 done"},
			{"equal, stuck: never reclaimed from itself", 0, 5, "started", 0, false, 0, "5 started"},
			{"higher, done", 0, 3, "done", 0, false, 0, "3 done"},
			{"higher, failed: Forget first", 0, 3, "failed", 0, false, 0, "3 failed"},
			{"higher, running", 0, 3, "started", now, false, 0, "3 started"},
			{"higher, started within ReclaimAfter", time.Hour, 3, "started", now - (59 * time.Minute).Microseconds(), false, 0, "3 started"},
			{"higher, stuck: reclaimed", 0, 3, "started", 0, true, 0, "5 done"},
			{"higher, started past ReclaimAfter: reclaimed", time.Hour, 3, "started", now - (61 * time.Minute).Microseconds(), true, 0, "5 done"},
			{"higher, stuck, reclaim off", -1, 3, "started", 0, false, 0, "3 started"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := "k:" + tc.name
				if tc.token != 0 {
					mustExec(t, h, fmt.Sprintf("INSERT INTO %s (action_key, token, state, started_at) VALUES ('%s', %d, '%s', %d)", name, key, tc.token, tc.state, tc.startedAt))
				}
				l.ReclaimAfter = tc.reclaimAfter
				runs := 0
				ran, err := l.Once(ctx, h, key, 5, func(context.Context) error { runs++; return nil })
				if ran != tc.ran || runs != map[bool]int{true: 1}[tc.ran] {
					t.Errorf("ran=%v (%d runs), want %v", ran, runs, tc.ran)
				}
				var se *fencing.StaleError
				switch {
				case tc.stale == 0 && err != nil:
					t.Errorf("error %v, want none", err)
				case tc.stale != 0 && (!errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) || se.Offered != 5 || se.Highest != tc.stale || se.Resource != key):
					t.Errorf("error %v, want StaleError 5 < %d", err, tc.stale)
				}
				var tok int64
				var state string
				if err := h.QueryRow(fmt.Sprintf("SELECT token, state FROM %s WHERE action_key = '%s'", name, key)).Scan(&tok, &state); err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprint(tok, " ", state); got != tc.after {
					t.Errorf("row afterwards %q, want %q", got, tc.after)
				}
			})
		}
		l.ReclaimAfter = 0
		for _, bad := range []fencing.Token{0, 1 << 63} {
			if ran, err := l.Once(ctx, h, "k", bad, func(context.Context) error { return nil }); ran || err == nil {
				t.Errorf("token %d accepted: %v %v", bad, ran, err)
			}
		}
		if ran, err := l.Once(ctx, h, "k:max", 1<<63-1, func(context.Context) error { return nil }); !ran || err != nil {
			t.Errorf("token 2^63-1: %v %v", ran, err)
		}
		for n, ok := range map[int]bool{0: false, 1: true, 255: true, 256: false} {
			ran, err := l.Once(ctx, h, strings.Repeat("x", n), 5, func(context.Context) error { return nil })
			if ran != ok || (err == nil) != ok {
				t.Errorf("key of %d bytes: ran=%v %v, want ok=%v", n, ran, err, ok)
			}
		}
	})
}

// TestLedgerTwoHolders: holders with tokens 1 and 2 race for 40 keys. Each
// action runs exactly once, and wherever holder 2 claimed first, holder 1
// is told it is stale.
func TestLedgerTwoHolders(t *testing.T) {
	forEachDBAndFoundRows(t, func(t *testing.T, db dbtest.DB) {
		h, l, _ := newLedger(t, db)
		ctx := context.Background()
		const keys = 40
		var runs [keys]atomic.Int32
		var winner [keys]atomic.Uint64
		var results [3][keys]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, tok := range []fencing.Token{1, 2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for k := range keys {
					ran, err := l.Once(ctx, h, fmt.Sprint("key-", k), tok, func(context.Context) error {
						runs[k].Add(1)
						winner[k].Store(tok)
						return nil
					})
					if ran && err != nil {
						t.Errorf("token %d key %d: ran with error %v", tok, k, err)
					}
					results[tok][k] = err
				}
			}()
		}
		close(start)
		wg.Wait()
		won := map[uint64]int{}
		for k := range keys {
			if n := runs[k].Load(); n != 1 {
				t.Fatalf("key %d: the action ran %d times", k, n)
			}
			won[winner[k].Load()]++
			if results[2][k] != nil {
				t.Errorf("key %d: holder 2 got %v", k, results[2][k])
			}
			if winner[k].Load() == 2 && !errors.Is(results[1][k], fencing.ErrStale) {
				t.Errorf("key %d: holder 2 claimed it, holder 1 got %v, want ErrStale", k, results[1][k])
			}
		}
		t.Logf("keys won: %v", won)
	})
}

// TestLedgerRollback: Once inside the lifetime of the caller's transaction
// that rolls back. The claim was committed on its own, so the action does
// not run a second time; and *sql.Tx cannot be passed at all.
func TestLedgerRollback(t *testing.T) {
	if reflect.TypeFor[*sql.Tx]().Implements(reflect.TypeFor[fencing.LedgerDB]()) {
		t.Fatal("*sql.Tx satisfies LedgerDB: a claim inside a transaction that rolls back would let the action run twice")
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[*sql.DB](), reflect.TypeFor[*sql.Conn]()} {
		if !typ.Implements(reflect.TypeFor[fencing.LedgerDB]()) {
			t.Fatalf("%v does not satisfy LedgerDB", typ)
		}
	}
	forEachDBAndFoundRows(t, func(t *testing.T, db dbtest.DB) {
		h, l, name := newLedger(t, db)
		ctx := context.Background()
		mustExec(t, h, fmt.Sprintf("CREATE TABLE %s_orders (id BIGINT PRIMARY KEY)", name))
		t.Cleanup(func() { h.Exec(fmt.Sprintf("DROP TABLE %s_orders", name)) })
		var runs atomic.Int32
		act := func(context.Context) error { runs.Add(1); return nil }
		for attempt := range 2 {
			tx, err := h.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			// A failure must not leave it open: MySQL's DROP TABLE at
			// cleanup would wait for it (a metadata lock) for good.
			t.Cleanup(func() { tx.Rollback() })
			insert := func() {
				if _, err := tx.Exec(fmt.Sprintf("INSERT INTO %s_orders VALUES (%d)", name, attempt)); err != nil {
					t.Fatal(err)
				}
			}
			// SQLite has one writer at a time: Once would wait for the
			// caller's write transaction, so there the caller writes after.
			if db.Name != "sqlite" {
				insert()
			}
			if _, err := l.Once(ctx, h, "sms:order-77", 5, act); err != nil {
				t.Fatal(err)
			}
			if db.Name == "sqlite" {
				insert()
			}
			tx.Rollback() // the caller's work fails after the side effect
		}
		if runs.Load() != 1 {
			t.Fatalf("the action ran %d times", runs.Load())
		}
		if st, _ := l.State(ctx, h, "sms:order-77"); st != fencing.LedgerDone {
			t.Fatalf("state %q", st)
		}
	})
}

// TestLedgerReclaim: holder 3 claims, then pauses inside its action past
// ReclaimAfter (ignoring its context, which Once cancels at half of it).
// Holder 5 reclaims and runs the action; when holder 3 wakes, recording its
// outcome fails with ErrStale and leaves holder 5's record alone.
func TestLedgerReclaim(t *testing.T) {
	forEachDBAndFoundRows(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		h, l, _ := newLedger(t, db)
		l.ReclaimAfter = time.Second
		ctx := context.Background()
		ctxDone := make(chan time.Duration, 1)
		wake := make(chan struct{})
		type result struct {
			ran bool
			err error
		}
		res3 := make(chan result, 1)
		began := time.Now()
		go func() {
			ran, err := l.Once(ctx, h, "pay:77", 3, func(ctx context.Context) error {
				<-ctx.Done()
				ctxDone <- time.Since(began)
				<-wake // paused past ReclaimAfter
				return nil
			})
			res3 <- result{ran, err}
		}()
		if d := <-ctxDone; d < 400*time.Millisecond || d > 900*time.Millisecond {
			t.Errorf("the action's context ended after %v, want ReclaimAfter/2 = 500ms", d)
		}
		if ran, err := l.Once(ctx, h, "pay:77", 5, func(context.Context) error { return nil }); ran || err != nil {
			t.Fatalf("holder 5 within ReclaimAfter: ran=%v %v", ran, err)
		}
		time.Sleep(time.Until(began.Add(1100 * time.Millisecond)))
		if ran, err := l.Once(ctx, h, "pay:77", 5, func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("holder 5 past ReclaimAfter: ran=%v %v", ran, err)
		}
		if ran, err := l.Once(ctx, h, "pay:77", 4, func(context.Context) error { return nil }); ran || !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("holder 4 after 5 reclaimed: ran=%v %v", ran, err)
		}
		close(wake)
		r := <-res3
		var se *fencing.StaleError
		if !r.ran || !errors.As(r.err, &se) || se.Offered != 3 || se.Highest != 5 {
			t.Fatalf("holder 3 after the reclaim: ran=%v %v; want ran and StaleError 3 < 5", r.ran, r.err)
		}
		if st, _ := l.State(ctx, h, "pay:77"); st != fencing.LedgerDone {
			t.Fatalf("state %q", st)
		}
	})
}

// TestLedgerOnceAgain: once a key's action has run, Once on it runs nothing
// more: not while the action is still running (a caller with the same
// token), not once it is done (the same token, a higher one, or a lower
// one, which is also told it is stale). On MySQL whatever the DSN says of
// clientFoundRows: with it, a claim's INSERT that found the key's row and
// left it alone counted one row, as a new claim does.
func TestLedgerOnceAgain(t *testing.T) {
	forEachDBAndFoundRows(t, func(t *testing.T, db dbtest.DB) {
		h, l, _ := newLedger(t, db)
		ctx := context.Background()
		const key = "sms:order-77:shipped"
		var runs atomic.Int32
		act := func(context.Context) error { runs.Add(1); return nil }
		ran, err := l.Once(ctx, h, key, 5, func(ctx context.Context) error {
			runs.Add(1)
			if ran, err := l.Once(ctx, h, key, 5, act); ran || err != nil {
				t.Errorf("Once with the same token while the action runs: ran=%v %v, want false and no error", ran, err)
			}
			return nil
		})
		if !ran || err != nil {
			t.Errorf("first Once: ran=%v %v", ran, err)
		}
		for _, tc := range []struct {
			token fencing.Token
			stale bool
		}{{5, false}, {6, false}, {4, true}} {
			ran, err := l.Once(ctx, h, key, tc.token, act)
			if ran || (err != nil) != tc.stale || tc.stale && !errors.Is(err, fencing.ErrStale) {
				t.Errorf("Once with token %d after the action is done: ran=%v %v, want false and stale=%v", tc.token, ran, err, tc.stale)
			}
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the action ran %d times, want 1", n)
		}
		if st, err := l.State(ctx, h, key); st != fencing.LedgerDone || err != nil {
			t.Errorf("state %q %v, want %q", st, err, fencing.LedgerDone)
		}
	})
}

// TestLedgerOneTokenRace: four callers with one token (a holder's retries,
// or its goroutines) race for each of 20 keys. Each action runs exactly
// once, and the other three are told it did not run for them, without an
// error.
func TestLedgerOneTokenRace(t *testing.T) {
	forEachDBAndFoundRows(t, func(t *testing.T, db dbtest.DB) {
		h, l, _ := newLedger(t, db)
		ctx := context.Background()
		const keys, callers = 20, 4
		var runs, reported [keys]atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for k := range keys {
					ran, err := l.Once(ctx, h, fmt.Sprint("key-", k), 7, func(context.Context) error {
						runs[k].Add(1)
						return nil
					})
					if err != nil {
						t.Errorf("key %d: ran=%v %v", k, ran, err)
					}
					if ran {
						reported[k].Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		for k := range keys {
			if r, n := runs[k].Load(), reported[k].Load(); r != 1 || n != 1 {
				t.Errorf("key %d: the action ran %d times, %d callers said they ran it; want 1 and 1", k, r, n)
			}
		}
	})
}

// TestLedgerMySQLNarrowKey: a ledger table made by hand with a key column
// too narrow for the key. MySQL's INSERT IGNORE, which the claim uses
// there, cuts the key to fit and counts the row as added; the claim must
// not count as made (its row is under another key), and the action must
// not run.
func TestLedgerMySQLNarrowKey(t *testing.T) {
	for label, db := range map[string]dbtest.DB{"mysql": dbtest.MySQL(), "mysql_clientFoundRows": dbtest.MySQLFoundRows()} {
		t.Run(label, func(t *testing.T) {
			h := dbtest.Open(t, db)
			name := dbtest.Table(t, h)
			mustExec(t, h, "CREATE TABLE "+name+" (action_key VARBINARY(10) NOT NULL PRIMARY KEY, token BIGINT NOT NULL, state VARCHAR(16) NOT NULL, detail VARCHAR(1000), started_at BIGINT NOT NULL DEFAULT 0)")
			l, err := fencing.NewLedger(db.Dialect, name)
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			ran, err := l.Once(context.Background(), h, "sms:order-77:shipped", 5, func(context.Context) error { runs++; return nil })
			if ran || runs != 0 || err == nil {
				t.Fatalf("a key cut to fit the column: ran=%v (%d runs) %v, want an error and no run", ran, runs, err)
			}
			t.Log(err)
		})
	}
}
