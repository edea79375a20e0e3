package fencingpgx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencehq/fence/fencing/dblock"
	"github.com/fencehq/fence/fencing/fencingpgx"
)

// TestLockInTx: advisory locks through pgx: SET LOCAL timeouts inside, a
// contender times out or fails at once, a row lock through Runner(tx).
func TestLockInTx(t *testing.T) {
	_, h, pool := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := []string{fmt.Sprint(t.Name(), time.Now().UnixNano(), "b"), fmt.Sprint(t.Name(), time.Now().UnixNano(), "a")}
	name, _ := newTable(t, h, pool)
	err := fencingpgx.LockInTx(ctx, pool, dblock.Options{Timeout: 300 * time.Millisecond, IdleTimeout: 4 * time.Second}, names, func(tx pgx.Tx) error {
		var lt, it string
		if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&lt, &it); err != nil {
			return err
		}
		if lt != "300ms" || it != "4s" {
			t.Errorf("inside: lock_timeout %s, idle_in_transaction_session_timeout %s; want 300ms, 4s", lt, it)
		}
		if found, err := dblock.LockRow(ctx, fencingpgx.Runner(tx), dblock.Options{}, name, []string{"id"}, 1); !found || err != nil {
			t.Errorf("LockRow: %v %v", found, err)
		}
		called := false
		err := fencingpgx.LockInTx(ctx, pool, dblock.Options{Timeout: 50 * time.Millisecond}, names[1:], func(pgx.Tx) error { called = true; return nil })
		if !errors.Is(err, dblock.ErrLockTimeout) || called {
			t.Errorf("contender: %v (fn called %v), want ErrLockTimeout", err, called)
		}
		err = fencingpgx.LockInTx(ctx, pool, dblock.Options{Wait: dblock.NoWait}, names, func(pgx.Tx) error { called = true; return nil })
		if !errors.Is(err, dblock.ErrNotAvailable) || called {
			t.Errorf("NoWait: %v (fn called %v), want ErrNotAvailable", err, called)
		}
		other, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer other.Rollback(ctx)
		if _, err := dblock.LockRow(ctx, fencingpgx.Runner(other), dblock.Options{Wait: dblock.NoWait}, name, []string{"id"}, 1); !errors.Is(err, dblock.ErrNotAvailable) {
			t.Errorf("row NoWait: %v, want ErrNotAvailable", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fencingpgx.LockInTx(ctx, pool, dblock.Options{Wait: dblock.NoWait}, names, func(pgx.Tx) error { return nil }); err != nil {
		t.Errorf("after: %v", err)
	}
	if err := fencingpgx.LockInTx(ctx, pool, dblock.Options{}, nil, func(pgx.Tx) error { return nil }); !errors.Is(err, dblock.ErrBadInput) {
		t.Errorf("no names: %v, want ErrBadInput", err)
	}
}

// TestLockInSession: session locks through a pgx pool: held across fn's
// transactions, a contender times out, released after; a failed call
// leaves nothing on the pool's connections.
func TestLockInSession(t *testing.T) {
	_, _, pool := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := []string{fmt.Sprint(t.Name(), time.Now().UnixNano(), "a")}
	held := func() (n int) {
		pool.QueryRow(ctx, "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1", dblock.Key(names[0])).Scan(&n)
		return n
	}
	err := fencingpgx.LockInSession(ctx, pool, dblock.Options{}, names, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "BEGIN; COMMIT"); err != nil {
			return err
		}
		if n := held(); n != 1 {
			t.Errorf("inside, after a transaction: %d locks held", n)
		}
		err := fencingpgx.LockInSession(ctx, pool, dblock.Options{Timeout: 50 * time.Millisecond}, names, func(*pgx.Conn) error { return nil })
		if !errors.Is(err, dblock.ErrLockTimeout) {
			t.Errorf("contender: %v, want ErrLockTimeout", err)
		}
		err = fencingpgx.LockInTx(ctx, pool, dblock.Options{Wait: dblock.NoWait}, names, func(pgx.Tx) error { return nil })
		if !errors.Is(err, dblock.ErrNotAvailable) {
			t.Errorf("transaction-scoped contender: %v, want ErrNotAvailable", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 0 {
		t.Errorf("after: %d locks held", n)
	}
}
