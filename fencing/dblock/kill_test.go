package dblock_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/dblock"
	"github.com/fencehq/fence/internal/dbtest"
)

// TestTerminatedHolderReleases: a helper process holds a lock (transaction
// or session scope); pg_terminate_backend ends its server session, and the
// lock is free at once, with no timer.
func TestTerminatedHolderReleases(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	for _, mode := range []string{"intx", "session"} {
		t.Run(mode, func(t *testing.T) {
			names := unique(t, "job")
			holder := start(t, mode, names)
			pid := holder.locked(ctx)
			err := dblock.InTx(ctx, h, dblock.Options{Wait: dblock.NoWait}, names, func(*sql.Tx) error { return nil })
			if !errors.Is(err, dblock.ErrNotAvailable) {
				t.Fatalf("while held: %v, want ErrNotAvailable", err)
			}
			var ok bool
			// The timeout makes it wait until the backend has exited.
			if err := h.QueryRow("SELECT pg_terminate_backend($1, 10000)", pid).Scan(&ok); err != nil || !ok {
				t.Fatalf("pg_terminate_backend(%d): %v %v", pid, ok, err)
			}
			if err := dblock.InTx(ctx, h, dblock.Options{Wait: dblock.NoWait}, names, func(*sql.Tx) error { return nil }); err != nil {
				t.Errorf("after the holder's session ended: %v", err)
			}
			t.Logf("holder: %s", holder.done(ctx))
		})
	}
}

// TestIdleHolderLosesItsLocks: a holder idle in its transaction longer
// than IdleTimeout loses its session and its locks (Postgres decides when);
// InTx reports the failure.
func TestIdleHolderLosesItsLocks(t *testing.T) {
	h := dbtest.Open(t, dbtest.Postgres())
	ctx := testCtx(t)
	names := unique(t, "job")
	var tries int
	err := dblock.InTx(ctx, h, dblock.Options{IdleTimeout: 50 * time.Millisecond}, names, func(tx *sql.Tx) error {
		waitFor(ctx, t, "another session takes the idle holder's lock", func() bool {
			tries++
			return dblock.InTx(ctx, h, dblock.Options{Wait: dblock.NoWait}, names, func(*sql.Tx) error { return nil }) == nil
		})
		_, err := tx.ExecContext(ctx, "SELECT 1")
		return err
	})
	t.Logf("holder: %v (after %d tries)", err, tries)
	if !errors.Is(err, dblock.ErrIdleTimeout) {
		t.Fatalf("the holder cut off by idle_in_transaction_session_timeout: %v, want ErrIdleTimeout", err)
	}
}

// TestMySQLSession: GET_LOCK between two processes: the waiter's GET_LOCK
// returns 0 (ErrLockTimeout), NoWait fails at once, KILL of the holder's
// connection releases the lock.
func TestMySQLSession(t *testing.T) {
	db := dbtest.MySQL()
	h := dbtest.Open(t, db)
	ctx := testCtx(t)
	names := unique(t, "b", "a")
	my := dblock.Options{Dialect: fencing.MySQL}
	holder := start(t, "session", names, "DIALECT=mysql")
	id := holder.locked(ctx)
	waiter := start(t, "session", names, "DIALECT=mysql", "TIMEOUT=100ms")
	if got := waiter.done(ctx); got != "timeout" {
		t.Errorf("second process: %s, want timeout", got)
	}
	called := false
	o := my
	o.Wait = dblock.NoWait
	err := dblock.InSession(ctx, h, o, names, func(*sql.Conn) error { called = true; return nil })
	if !errors.Is(err, dblock.ErrNotAvailable) || called {
		t.Errorf("NoWait: %v (fn called %v), want ErrNotAvailable", err, called)
	}
	if _, err := h.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the killed holder's locks are free", func() bool {
		var free int
		h.QueryRow("SELECT IS_FREE_LOCK(?)", fmt.Sprintf("dblock_%016x", uint64(dblock.Key(names[0])))).Scan(&free)
		return free == 1
	})
	o.Wait = dblock.Block
	err = dblock.InSession(ctx, h, o, names, func(conn *sql.Conn) error {
		// Both names are held, as GET_LOCK names of 23 characters.
		var n int
		for _, name := range names {
			var used int
			if err := conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", fmt.Sprintf("dblock_%016x", uint64(dblock.Key(name)))).Scan(&used); err != nil {
				return err
			}
			n += used
		}
		if n != 2 {
			t.Errorf("%d of 2 locks held", n)
		}
		return nil
	})
	if err != nil {
		t.Errorf("after KILL: %v", err)
	}
	t.Logf("holder: %s", holder.done(ctx))
}

// TestMySQLRows: a row lock held by a helper process; NoWait fails with
// ErrNotAvailable, SkipLocked sees no row, a blocking wait ends at
// innodb_lock_wait_timeout with ErrLockTimeout.
func TestMySQLRows(t *testing.T) {
	h := dbtest.Open(t, dbtest.MySQL())
	ctx := testCtx(t)
	table := dbtest.Table(t, h)
	if _, err := h.Exec("CREATE TABLE " + table + " (id VARCHAR(10) PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec("INSERT INTO " + table + " VALUES ('1'), ('2')"); err != nil {
		t.Fatal(err)
	}
	holder := start(t, "row", []string{"1"}, "DIALECT=mysql", "TABLE="+table)
	holder.locked(ctx)
	my := dblock.Options{Dialect: fencing.MySQL}
	for _, c := range []struct {
		w         dblock.Wait
		id        string
		wantFound bool
		wantErr   error
	}{
		{dblock.Block, "1", false, dblock.ErrLockTimeout},
		{dblock.NoWait, "1", false, dblock.ErrNotAvailable},
		{dblock.SkipLocked, "1", false, nil},
		{dblock.NoWait, "2", true, nil},
	} {
		conn, err := h.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// innodb_lock_wait_timeout is whole seconds: the smallest is 1.
		if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		o := my
		o.Wait = c.w
		found, err := dblock.LockRow(ctx, fencing.SQL(tx), o, table, []string{"id"}, c.id)
		tx.Rollback()
		conn.Raw(func(any) error { return errors.New("discard") })
		conn.Close()
		if found != c.wantFound || !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
			t.Errorf("%v row %s: found %v, %v; want %v, %v", c.w, c.id, found, err, c.wantFound, c.wantErr)
		}
	}
	if got := holder.done(ctx); got != "ok" {
		t.Errorf("holder: %s", got)
	}
}

// TestMySQLOppositeOrder is TestOppositeOrder's InSession half with
// GET_LOCK: a third session holds the lower name while both processes
// queue; through InSession the pair never deadlocks. (Unsorted, it does:
// MariaDB reports 1213, and the test fails.)
func TestMySQLOppositeOrder(t *testing.T) {
	h := dbtest.Open(t, dbtest.MySQL())
	ctx := testCtx(t)
	waiting := func() (n int) {
		h.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'").Scan(&n)
		return n
	}
	for round := range 3 {
		lo, hi := pair(t)
		var p1, p2 *proc
		err := dblock.InSession(ctx, h, dblock.Options{Dialect: fencing.MySQL}, []string{lo}, func(*sql.Conn) error {
			p1 = start(t, "session", []string{lo, hi}, "DIALECT=mysql", "TIMEOUT=30s")
			waitFor(ctx, t, "first process waits", func() bool { return waiting() == 1 })
			p2 = start(t, "session", []string{hi, lo}, "DIALECT=mysql", "TIMEOUT=30s")
			waitFor(ctx, t, "second process waits", func() bool { return waiting() == 2 })
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var outcomes []string
		for _, p := range []*proc{p1, p2} {
			outcomes = append(outcomes, p.done(ctx))
		}
		t.Logf("round %d: %v", round, outcomes)
		if outcomes[0] != "ok" || outcomes[1] != "ok" {
			t.Fatalf("round %d: %v, want [ok ok]", round, outcomes)
		}
	}
}
