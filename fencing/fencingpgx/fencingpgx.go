// Package fencingpgx runs fencing's guarded writes through pgx/v5 (a
// *pgxpool.Pool, a *pgx.Conn or a pgx.Tx).
//
//	totals, _ := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: "totals", Key: []string{"restaurant_id"}})
//	err := fencingpgx.Update(ctx, pool, totals, token, 77, map[string]any{"amount": 42000})
//
// LockInTx and LockInSession take package dblock's plain advisory locks
// through pgx, and Runner(tx) lets dblock.LockRow lock a row in a pgx.Tx.
package fencingpgx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/dblock"
)

// DB is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Runner adapts a pgx handle to fencing.Runner.
func Runner(db DB) fencing.Runner { return runner{db} }

type runner struct{ db DB }

func (r runner) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := r.db.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (r runner) QueryInt64(ctx context.Context, sql string, args ...any) (int64, bool, error) {
	var v int64
	err := r.db.QueryRow(ctx, sql, args...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

// Update is fencing.Table.Update through pgx.
func Update(ctx context.Context, db DB, t *fencing.Table, token fencing.Token, key any, set map[string]any) error {
	return t.UpdateVia(ctx, runner{db}, token, key, set)
}

// EnsureColumn is fencing.Table.EnsureColumn through pgx.
func EnsureColumn(ctx context.Context, db DB, t *fencing.Table) error {
	return t.EnsureColumnVia(ctx, runner{db})
}

// Beginner is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx (a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx is fencing.Table.InTx through pgx: check and record the token on the
// row with this key, then run fn in the same transaction; commit if fn
// returns nil, roll back otherwise.
func InTx(ctx context.Context, db Beginner, t *fencing.Table, token fencing.Token, key any, fn func(tx pgx.Tx) error) error {
	return inTx(ctx, db, func(tx pgx.Tx) error { return t.UpdateVia(ctx, runner{tx}, token, key, nil) }, fn)
}

// InTxSigned is InTx with a signed token, for a table with a Verifier
// (see fencing.Table.UpdateSigned).
func InTxSigned(ctx context.Context, db Beginner, t *fencing.Table, signed string, key any, fn func(tx pgx.Tx) error) error {
	return inTx(ctx, db, func(tx pgx.Tx) error { return t.UpdateSigned(ctx, runner{tx}, signed, key, nil) }, fn)
}

// LockInTx is dblock.InTx through pgx: in a transaction of db, set
// lock_timeout and idle_in_transaction_session_timeout (SET LOCAL), take
// transaction-scoped advisory locks on names in ascending key order, run
// fn; commit if fn returns nil, roll back otherwise. The locks end with the
// transaction. Failures match dblock's errors (ErrLockTimeout,
// ErrNotAvailable, ErrDeadlock, ErrIdleTimeout, ErrBadInput).
func LockInTx(ctx context.Context, db Beginner, o dblock.Options, names []string, fn func(tx pgx.Tx) error) error {
	err := inTx(ctx, db, func(tx pgx.Tx) error { return dblock.LockTx(ctx, runner{tx}, o, names) }, fn)
	// LockTx's errors are typed already; a 55P03 of fn's own statements is
	// left as it is (only fn knows whether it used NOWAIT), an idle
	// timeout (25P03) is typed.
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "55P03" {
		return err
	}
	return dblock.Classify(err, dblock.Block)
}

// LockInSession is dblock.InSession through pgx: on one connection
// acquired from pool, take session-scoped advisory locks on names
// (dblock.LockSession), run fn, unlock. If locking or unlocking fails (or fn
// panics) the connection is closed, not returned to the pool, so its locks
// end with it. fn must not release or close conn.
func LockInSession(ctx context.Context, pool *pgxpool.Pool, o dblock.Options, names []string, fn func(conn *pgx.Conn) error) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("dblock: connection: %w", err)
	}
	return dblock.WithSession(ctx, runner{c.Conn()}, o, names, func() error { return fn(c.Conn()) }, func(discard bool) {
		if discard {
			// Closes the server connection, which releases its locks; the
			// pool destroys a closed connection on Release.
			c.Conn().Close(context.WithoutCancel(ctx))
		}
		c.Release()
	})
}

// inTx runs claim, then fn, in one transaction.
func inTx(ctx context.Context, db Beginner, claim, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("fencing: begin: %w", err)
	}
	return fencing.RunTx(func() error { return tx.Commit(ctx) }, func() error {
		if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			return err
		}
		return nil
	}, func() error {
		if err := claim(tx); err != nil {
			return err
		}
		return fn(tx)
	})
}
