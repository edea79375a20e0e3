package fencingpgx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/fencingpgx"
	"github.com/fencehq/fence/internal/dbtest"
)

// TestPgx runs the guarded write through a pool, a conn and a tx.
func TestPgx(t *testing.T) {
	db := dbtest.Postgres()
	h := dbtest.Open(t, db) // starts Postgres if needed; also cleans up the table
	name := dbtest.Table(t, h)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL)", name)); err != nil {
		t.Fatal(err)
	}
	pool.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES (1, 0), (2, 0)", name))
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: name, Key: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fencingpgx.EnsureColumn(ctx, pool, tbl); err != nil {
		t.Fatal(err)
	}
	read := func(id int) (amount, fence int64) {
		pool.QueryRow(ctx, fmt.Sprintf("SELECT amount, fence FROM %s WHERE id = $1", name), id).Scan(&amount, &fence)
		return
	}

	// Pool.
	if err := fencingpgx.Update(ctx, pool, tbl, 5, 1, map[string]any{"amount": 50}); err != nil {
		t.Fatal(err)
	}
	if err := fencingpgx.Update(ctx, pool, tbl, 5, 1, map[string]any{"amount": 51}); err != nil {
		t.Fatalf("equal token: %v", err)
	}
	var se *fencing.StaleError
	if err := fencingpgx.Update(ctx, pool, tbl, 4, 1, map[string]any{"amount": 40}); !errors.As(err, &se) || se.Highest != 5 {
		t.Fatalf("stale via pool: %v", err)
	}
	if err := fencingpgx.Update(ctx, pool, tbl, 4, 3, map[string]any{"amount": 40}); !errors.Is(err, fencing.ErrNoRow) {
		t.Fatalf("missing row via pool: %v", err)
	}
	// Conn.
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := fencingpgx.Update(ctx, conn, tbl, 7, 1, map[string]any{"amount": 70}); err != nil {
		t.Fatal(err)
	}
	if a, f := read(1); a != 70 || f != 7 {
		t.Fatalf("via conn: %d %d", a, f)
	}
	// Tx, through InTx: two rows under one check; a stale token runs nothing.
	err = fencingpgx.InTx(ctx, pool, tbl, 8, 1, func(tx pgx.Tx) error {
		if err := fencingpgx.Update(ctx, tx, tbl, 8, 1, map[string]any{"amount": 80}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET amount = 81 WHERE id = 2", name))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if a, f := read(1); a != 80 || f != 8 {
		t.Fatalf("after InTx: %d %d", a, f)
	}
	ran := false
	if err := fencingpgx.InTx(ctx, conn, tbl, 6, 1, func(pgx.Tx) error { ran = true; return nil }); !errors.Is(err, fencing.ErrStale) || ran {
		t.Fatalf("stale InTx: %v (fn ran: %v)", err, ran)
	}
}
