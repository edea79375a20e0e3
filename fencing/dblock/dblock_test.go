package dblock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/dblock"
	"github.com/fencehq/fence/internal/dbtest"
)

// unique makes lock names no other test (or run) shares.
func unique(t testing.TB, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%s/%d/%s", t.Name(), time.Now().UnixNano(), n)
	}
	return out
}

// heldBy counts the advisory locks on names' 64-bit keys held or awaited
// (granted true or false) by any session. The key is computed by Postgres
// (SHA-256 of the same bytes), not by dblock.Key.
func heldBy(t testing.TB, h *sql.DB, granted bool, names ...string) int {
	t.Helper()
	var n int
	err := h.QueryRow(`SELECT COUNT(*) FROM pg_locks l, unnest($1::text[]) AS name
		WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted = $2
		AND ((l.classid::bigint << 32) | l.objid::bigint) = ('x' || left(encode(sha256(convert_to('fence/dblock', 'UTF8') || '\x00'::bytea || convert_to(name, 'UTF8')), 'hex'), 16))::bit(64)::bigint`,
		names, granted).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pair returns two fresh names, the one with the lower key (dblock's first
// lock) first.
func pair(t testing.TB) (lo, hi string) {
	names := unique(t, "a", "b")
	if dblock.Key(names[1]) < dblock.Key(names[0]) {
		return names[1], names[0]
	}
	return names[0], names[1]
}

// waitFor polls until cond holds (no time bound but the test's context).
func waitFor(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("never: %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestKeyIsPostgresComputedHash(t *testing.T) {
	// Literals: SHA-256("fence/dblock\x00a") = ac59d985470d9afe…
	if got, want := dblock.Key("a"), int64(-6027547459812746498); got != want {
		t.Errorf("Key(a) = %d, want %d", got, want)
	}
	if ns, h := dblock.Key2(7, "a"); ns != 7 || h != int32(-1403397755) /* 0xac59d985 */ {
		t.Errorf("Key2(7, a) = %d, %d", ns, h)
	}
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	names := unique(t, "a", "b", "c")
	err := dblock.InTx(ctx, h, dblock.Options{}, names, func(tx *sql.Tx) error {
		if n := heldBy(t, h, true, names...); n != 3 {
			t.Errorf("%d of 3 locks held where Postgres computes their keys", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := heldBy(t, h, true, names...); n != 0 {
		t.Errorf("%d locks still held after the transaction", n)
	}
}

func TestTwoIntForm(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	names := unique(t, "x")
	err := dblock.InTx(ctx, h, dblock.Options{Namespace: 42}, names, func(tx *sql.Tx) error {
		var n int
		_, hash := dblock.Key2(42, names[0])
		if err := h.QueryRow(`SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
			AND classid = 42 AND objid = ($1::int4)::bit(32)::bigint::oid`, hash).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("two-int lock (42, %d) held %d times", hash, n)
		}
		// Another namespace, or the 64-bit form, is another lock.
		return dblock.InTx(ctx, h, dblock.Options{Namespace: 43, Wait: dblock.NoWait}, names, func(*sql.Tx) error {
			return dblock.InTx(ctx, h, dblock.Options{Wait: dblock.NoWait}, names, func(*sql.Tx) error { return nil })
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSetLocal: inside InTx the session has the caller's timeouts; after
// it, on the same connection, the server's defaults again.
func TestSetLocal(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	h.SetMaxOpenConns(1)
	ctx := testCtx(t)
	settings := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) string {
		var lt, it string
		if err := q.QueryRowContext(ctx, "SELECT current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&lt, &it); err != nil {
			t.Fatal(err)
		}
		return lt + " " + it
	}
	before := settings(h)
	for _, c := range []struct {
		o    dblock.Options
		want string
	}{
		{dblock.Options{}, "2s 10s"},
		{dblock.Options{Timeout: 250 * time.Millisecond, IdleTimeout: 3 * time.Second}, "250ms 3s"},
		{dblock.Options{Timeout: time.Nanosecond, IdleTimeout: 1500 * time.Microsecond}, "1ms 2ms"}, // never 0 (no limit)
	} {
		err := dblock.InTx(ctx, h, c.o, unique(t, "s"), func(tx *sql.Tx) error {
			if got := settings(tx); got != c.want {
				t.Errorf("%+v: inside: %s, want %s", c.o, got, c.want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := settings(h); got != before {
			t.Errorf("after: %s, want the defaults %s", got, before)
		}
		// A session lock sets lock_timeout for the session while it locks.
		names := unique(t, "s")
		err = dblock.InSession(ctx, h, c.o, names, func(conn *sql.Conn) error {
			if got := settings(conn); got != before {
				t.Errorf("%+v: InSession: %s after locking, want the defaults %s", c.o, got, before)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Unlocked, though the connection went back to the pool.
		if n := heldBy(t, h, true, names...); n != 0 {
			t.Errorf("after InSession: %d locks held", n)
		}
	}
}

func TestBadInputTakesNothing(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	many := make([]string, dblock.MaxNames+1)
	for i := range many {
		many[i] = fmt.Sprint("n", i)
	}
	many = unique(t, many...)
	ok := unique(t, "ok")
	for _, c := range []struct {
		name  string
		o     dblock.Options
		names []string
	}{
		{"no names", dblock.Options{}, nil},
		{"empty name", dblock.Options{}, append(unique(t, "a"), "")},
		{"too many names", dblock.Options{}, many},
		{"negative timeout", dblock.Options{Timeout: -time.Second}, ok},
		{"negative idle timeout", dblock.Options{IdleTimeout: -time.Second}, ok},
		{"skip locked advisory", dblock.Options{Wait: dblock.SkipLocked}, ok},
		{"unknown wait", dblock.Options{Wait: 7}, ok},
		{"sqlite", dblock.Options{Dialect: fencing.SQLite}, ok},
		{"mysql in a transaction", dblock.Options{Dialect: fencing.MySQL}, ok},
		{"mysql namespace", dblock.Options{Dialect: fencing.MySQL, Namespace: 1}, ok},
	} {
		t.Run(c.name, func(t *testing.T) {
			called := false
			err := dblock.InTx(ctx, h, c.o, c.names, func(*sql.Tx) error { called = true; return nil })
			if !errors.Is(err, dblock.ErrBadInput) || called {
				t.Errorf("InTx: %v (fn called: %v), want ErrBadInput", err, called)
			}
			if c.o.Dialect == fencing.MySQL && c.o.Namespace == 0 {
				return // InSession takes MySQL
			}
			err = dblock.InSession(ctx, h, c.o, c.names, func(*sql.Conn) error { called = true; return nil })
			if !errors.Is(err, dblock.ErrBadInput) || called {
				t.Errorf("InSession: %v (fn called: %v), want ErrBadInput", err, called)
			}
			if n := heldBy(t, h, true, append(c.names, many...)...); n != 0 {
				t.Errorf("%d locks taken", n)
			}
		})
	}
	for _, c := range []struct {
		name  string
		table string
		key   []string
		vals  []any
		w     dblock.Wait
	}{
		{"no key", "t", nil, nil, dblock.Block},
		{"bad table", "t; DROP TABLE t", []string{"id"}, []any{1}, dblock.Block},
		{"bad column", "t", []string{`id"`}, []any{1}, dblock.Block},
		{"values", "t", []string{"id"}, []any{1, 2}, dblock.Block},
		{"unknown wait", "t", []string{"id"}, []any{1}, 9},
	} {
		t.Run("row/"+c.name, func(t *testing.T) {
			_, err := dblock.LockRow(ctx, fencing.SQL(h), dblock.Options{Wait: c.w}, c.table, c.key, c.vals...)
			if !errors.Is(err, dblock.ErrBadInput) {
				t.Errorf("LockRow: %v, want ErrBadInput", err)
			}
		})
	}
}

func TestForUpdate(t *testing.T) {
	for _, c := range []struct {
		d    *fencing.Dialect
		key  []string
		w    dblock.Wait
		want string
	}{
		{fencing.Postgres, []string{"id"}, dblock.Block, `SELECT 1 FROM "app"."jobs" WHERE "id" = $1 FOR UPDATE`},
		{fencing.Postgres, []string{"a", "b"}, dblock.NoWait, `SELECT 1 FROM "app"."jobs" WHERE "a" = $1 AND "b" = $2 FOR UPDATE NOWAIT`},
		{fencing.MySQL, []string{"a", "b"}, dblock.SkipLocked, "SELECT 1 FROM `app`.`jobs` WHERE `a` = ? AND `b` = ? FOR UPDATE SKIP LOCKED"},
	} {
		got, err := dblock.ForUpdate(c.d, "app.jobs", c.key, c.w)
		if err != nil || got != c.want {
			t.Errorf("ForUpdate(%v, %v, %v) = %q, %v; want %q", c.d, c.key, c.w, got, err, c.want)
		}
	}
}

// TestAdvisoryContention: a helper process holds a transaction-scoped lock;
// this process and a second helper wait for it until lock_timeout fires,
// NoWait fails at once; once the holder ends, the lock is free.
func TestAdvisoryContention(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	names := unique(t, "job", "other")
	holder := start(t, "intx", names[:1])
	holder.locked(ctx)

	waiter := start(t, "intx", names, "TIMEOUT=100ms")
	if got := waiter.done(ctx); got != "timeout" {
		t.Errorf("second process: %s, want timeout", got)
	}
	called := false
	err := dblock.InTx(ctx, h, dblock.Options{Timeout: 50 * time.Millisecond}, names, func(*sql.Tx) error { called = true; return nil })
	if !errors.Is(err, dblock.ErrLockTimeout) || called {
		t.Errorf("waiter: %v (fn called: %v), want ErrLockTimeout", err, called)
	}
	err = dblock.InTx(ctx, h, dblock.Options{Wait: dblock.NoWait}, names, func(*sql.Tx) error { called = true; return nil })
	if !errors.Is(err, dblock.ErrNotAvailable) || called {
		t.Errorf("NoWait: %v (fn called: %v), want ErrNotAvailable", err, called)
	}
	err = dblock.InSession(ctx, h, dblock.Options{Timeout: 50 * time.Millisecond}, names, func(*sql.Conn) error { called = true; return nil })
	if !errors.Is(err, dblock.ErrLockTimeout) || called {
		t.Errorf("session waiter: %v (fn called: %v), want ErrLockTimeout", err, called)
	}
	if n := heldBy(t, h, true, names[1]); n != 0 {
		t.Errorf("the failed calls left %d locks on %q", n, names[1])
	}
	if got := holder.done(ctx); got != "ok" {
		t.Errorf("holder: %s", got)
	}
	if err := dblock.InTx(ctx, h, dblock.Options{Wait: dblock.NoWait}, names, func(*sql.Tx) error { return nil }); err != nil {
		t.Errorf("after the holder: %v", err)
	}
}

// TestSessionContention: the same with a session-scoped holder, which
// releases explicitly.
func TestSessionContention(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	names := unique(t, "job")
	holder := start(t, "session", names)
	holder.locked(ctx)
	waiter := start(t, "session", names, "TIMEOUT=100ms")
	if got := waiter.done(ctx); got != "timeout" {
		t.Errorf("second process: %s, want timeout", got)
	}
	// A call that took a lower key before failing on the held one leaves
	// nothing behind: its connection is closed, not pooled.
	lower := unique(t, "lower")
	for dblock.Key(lower[0]) > dblock.Key(names[0]) {
		lower = unique(t, "lower")
	}
	err := dblock.InSession(ctx, h, dblock.Options{Wait: dblock.NoWait}, append(lower, names...), func(*sql.Conn) error { return nil })
	if !errors.Is(err, dblock.ErrNotAvailable) {
		t.Errorf("NoWait: %v, want ErrNotAvailable", err)
	}
	// Its server process ends a moment after the connection closes.
	waitFor(ctx, t, "the failed session call's first lock is released", func() bool { return heldBy(t, h, true, lower...) == 0 })
	err = dblock.InTx(ctx, h, dblock.Options{Wait: dblock.NoWait}, names, func(*sql.Tx) error { return nil })
	if !errors.Is(err, dblock.ErrNotAvailable) {
		t.Errorf("NoWait: %v, want ErrNotAvailable", err)
	}
	if got := holder.done(ctx); got != "ok" {
		t.Errorf("holder: %s", got)
	}
	if n := heldBy(t, h, true, names...); n != 0 {
		t.Errorf("after the holder's unlock: %d locks held", n)
	}
}

// TestRowContention: a helper process holds a row lock; a waiter times
// out, NoWait fails at once, SkipLocked sees no row, other rows are free.
func TestRowContention(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	table := dbtest.Table(t, h)
	if _, err := h.Exec("CREATE TABLE " + table + " (id TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec("INSERT INTO " + table + " VALUES ('1'), ('2')"); err != nil {
		t.Fatal(err)
	}
	holder := start(t, "row", []string{"1"}, "TABLE="+table)
	holder.locked(ctx)
	waiter := start(t, "row", []string{"1"}, "TABLE="+table, "TIMEOUT=100ms")
	if got := waiter.done(ctx); got != "timeout" {
		t.Errorf("second process: %s, want timeout", got)
	}
	for _, c := range []struct {
		o         dblock.Options
		id        string
		wantFound bool
		wantErr   error
	}{
		{dblock.Options{Timeout: 50 * time.Millisecond}, "1", false, dblock.ErrLockTimeout},
		{dblock.Options{Wait: dblock.NoWait}, "1", false, dblock.ErrNotAvailable},
		{dblock.Options{Wait: dblock.SkipLocked}, "1", false, nil},
		{dblock.Options{Wait: dblock.NoWait}, "2", true, nil},
		{dblock.Options{}, "3", false, nil},
	} {
		err := inTx(ctx, h, func(tx *sql.Tx) error {
			found, err := dblock.LockRow(ctx, fencing.SQL(tx), c.o, table, []string{"id"}, c.id)
			if found != c.wantFound {
				t.Errorf("%+v row %s: found %v", c.o, c.id, found)
			}
			return err
		})
		if !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
			t.Errorf("%+v row %s: %v, want %v", c.o, c.id, err, c.wantErr)
		}
	}
	if got := holder.done(ctx); got != "ok" {
		t.Errorf("holder: %s", got)
	}
}

// TestOppositeOrder: two processes lock the same two names, given in
// opposite orders, and are made to start their second lock while the other
// holds its first, if it can: a third session holds the first name ("a")
// while both queue. Taken in the order given ("raw"), the pair deadlocks
// (one fails with ErrDeadlock); through dblock it never does: both start
// with the same lock, whichever order they were given.
func TestOppositeOrder(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	for _, c := range []struct {
		mode         string
		wantDeadlock bool
	}{{"raw", true}, {"intx", false}} {
		t.Run(c.mode, func(t *testing.T) {
			for round := range 3 {
				lo, hi := pair(t)
				var p1, p2 *proc
				err := dblock.InTx(ctx, h, dblock.Options{}, []string{lo}, func(*sql.Tx) error {
					p1 = start(t, c.mode, []string{lo, hi}, "TIMEOUT=30s")
					waitFor(ctx, t, "first process waits for "+lo, func() bool { return heldBy(t, h, false, lo) == 1 })
					p2 = start(t, c.mode, []string{hi, lo}, "TIMEOUT=30s")
					waitFor(ctx, t, "second process waits", func() bool { return heldBy(t, h, false, lo, hi) == 2 })
					return nil // release lo: now p1 takes it and asks for hi
				})
				if err != nil {
					t.Fatal(err)
				}
				var outcomes []string
				for _, p := range []*proc{p1, p2} {
					outcomes = append(outcomes, p.done(ctx))
				}
				deadlocks := 0
				for _, o := range outcomes {
					if o == "deadlock" { // matched ErrDeadlock
						deadlocks++
					} else if o != "ok" {
						t.Errorf("round %d: %s", round, o)
					}
				}
				t.Logf("round %d: %v", round, outcomes)
				if c.wantDeadlock && deadlocks != 1 || !c.wantDeadlock && deadlocks != 0 {
					t.Fatalf("round %d: %v", round, outcomes)
				}
			}
		})
	}
}

// TestPanicReleases: a panic in fn propagates, and the locks are gone
// (transaction rolled back; session connection closed, not pooled).
func TestPanicReleases(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	for _, c := range []struct {
		name string
		run  func(names []string, fn func())
	}{
		{"InTx", func(names []string, fn func()) {
			dblock.InTx(ctx, h, dblock.Options{}, names, func(*sql.Tx) error { fn(); return nil })
		}},
		{"InSession", func(names []string, fn func()) {
			dblock.InSession(ctx, h, dblock.Options{}, names, func(*sql.Conn) error { fn(); return nil })
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			names := unique(t, "p")
			var got any
			func() {
				defer func() { got = recover() }()
				c.run(names, func() {
					if n := heldBy(t, h, true, names...); n != 1 {
						t.Errorf("inside: %d locks held", n)
					}
					panic("boom")
				})
			}()
			if got != "boom" {
				t.Errorf("recovered %v, want boom", got)
			}
			// A closed connection's server process ends a moment later.
			waitFor(ctx, t, "the locks are released after the panic", func() bool { return heldBy(t, h, true, names...) == 0 })
		})
	}
}

// TestInTxLeavesFnErrors: an error of fn's own NOWAIT statement comes back
// as the driver's, not labelled a lock timeout (InTx cannot know how fn
// waited); Classify with fn's Wait labels it.
func TestInTxLeavesFnErrors(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	table := dbtest.Table(t, h)
	if _, err := h.Exec("CREATE TABLE " + table + " (id INT PRIMARY KEY); INSERT INTO " + table + " VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	holder, err := h.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT 1 FROM "+table+" WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	err = dblock.InTx(ctx, h, dblock.Options{}, unique(t, "x"), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "SELECT 1 FROM "+table+" WHERE id = 1 FOR UPDATE NOWAIT")
		return err
	})
	if err == nil || errors.Is(err, dblock.ErrLockTimeout) || errors.Is(err, dblock.ErrNotAvailable) {
		t.Errorf("InTx: %v, want fn's error unlabelled", err)
	}
	if !errors.Is(dblock.Classify(err, dblock.NoWait), dblock.ErrNotAvailable) {
		t.Errorf("Classify(NoWait): %v", dblock.Classify(err, dblock.NoWait))
	}
}
