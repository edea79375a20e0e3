// Package fencingpgx runs fencing's guarded writes through pgx/v5 (a
// *pgxpool.Pool, a *pgx.Conn or a pgx.Tx).
//
//	totals, _ := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: "totals", Key: []string{"restaurant_id"}})
//	err := fencingpgx.Update(ctx, pool, totals, token, 77, map[string]any{"amount": 42000})
package fencingpgx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencehq/fence/fencing"
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
