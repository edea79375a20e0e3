package fencingpgx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/fencingpgx"
	"github.com/fencehq/fence/internal/dbtest"
)

// open returns Postgres (started if needed), a database/sql handle that also
// drops the test's tables, and a pgx pool closed when the test ends.
func open(t *testing.T) (dbtest.DB, *sql.DB, *pgxpool.Pool) {
	t.Helper()
	db := dbtest.Postgres()
	h := dbtest.Open(t, db)
	pool, err := pgxpool.New(context.Background(), db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return db, h, pool
}

// newTable creates a table (id, amount) with rows 1 and 2, adds the fence
// column through pgx, and returns its name and a Table for it.
func newTable(t *testing.T, h *sql.DB, pool *pgxpool.Pool) (string, *fencing.Table) {
	t.Helper()
	ctx := context.Background()
	name := dbtest.Table(t, h)
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
	return name, tbl
}

// TestPgx runs the guarded write through a pool, a conn and a tx.
func TestPgx(t *testing.T) {
	db, h, pool := open(t)
	ctx := context.Background()
	name, tbl := newTable(t, h, pool)
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
	// fn that ends the transaction itself and fails: its error, nothing about the closed tx.
	boom := errors.New("boom")
	err = fencingpgx.InTx(ctx, pool, tbl, 8, 1, func(tx pgx.Tx) error { tx.Rollback(ctx); return boom })
	if err != boom {
		t.Fatalf("InTx whose fn rolled back: %v", err)
	}
	// A rollback that fails (the connection died) is reported with fn's error.
	err = fencingpgx.InTx(ctx, pool, tbl, 8, 1, func(tx pgx.Tx) error {
		tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
		return boom
	})
	if !errors.Is(err, boom) || err == boom {
		t.Fatalf("InTx whose connection died: %v; want boom and the failed rollback", err)
	}
	t.Logf("InTx whose connection died: %v", err)
}

// TestPgxStaleInCallersTx: a write through the caller's pgx transaction,
// after that transaction read the row and a newer holder wrote it, is
// refused under every isolation level: ErrStale (READ COMMITTED) or a
// serialization failure (REPEATABLE READ, SERIALIZABLE), never nil.
func TestPgxStaleInCallersTx(t *testing.T) {
	_, h, pool := open(t)
	ctx := context.Background()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			name, tbl := newTable(t, h, pool)
			if err := fencingpgx.Update(ctx, pool, tbl, 5, 1, map[string]any{"amount": 500}); err != nil {
				t.Fatal(err)
			}
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var amount int64
			if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT amount FROM %s WHERE id = 1", name)).Scan(&amount); err != nil {
				t.Fatal(err)
			}
			if err := fencingpgx.Update(ctx, pool, tbl, 6, 1, map[string]any{"amount": 600}); err != nil {
				t.Fatal(err)
			}
			err = fencingpgx.Update(ctx, tx, tbl, 5, 1, map[string]any{"amount": 501})
			var pgErr *pgconn.PgError
			if !errors.Is(err, fencing.ErrStale) && !(iso != pgx.ReadCommitted && errors.As(err, &pgErr) && pgErr.Code == "40001") {
				t.Fatalf("stale write through the caller's %s transaction: %v", iso, err)
			}
			tx.Commit(ctx)
			var fence int64
			pool.QueryRow(ctx, fmt.Sprintf("SELECT amount, fence FROM %s WHERE id = 1", name)).Scan(&amount, &fence)
			if amount != 600 || fence != 6 {
				t.Fatalf("after the caller's commit: %d %d", amount, fence)
			}
		})
	}
}

// TestPgxUpsertDelete: Insert, Upsert, Delete and CompareAndSet through
// pgx (its command tags count the rows), in a pool and in a pgx
// transaction.
func TestPgxUpsertDelete(t *testing.T) {
	_, h, pool := open(t)
	ctx := context.Background()
	name := dbtest.Table(t, h)
	if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL)", name)); err != nil {
		t.Fatal(err)
	}
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: name, Key: []string{"id"}, DeletedColumn: "deleted", VersionColumn: "version"})
	if err != nil {
		t.Fatal(err)
	}
	if err := fencingpgx.EnsureColumn(ctx, pool, tbl); err != nil {
		t.Fatal(err)
	}
	r := fencingpgx.Runner(pool)
	row := func() string {
		var amount, fence, deleted, version int64
		if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT amount, fence, deleted, version FROM %s WHERE id = 1", name)).Scan(&amount, &fence, &deleted, &version); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("amount=%d fence=%d deleted=%d version=%d", amount, fence, deleted, version)
	}
	if err := tbl.InsertVia(ctx, r, 5, 1, map[string]any{"amount": 50}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.InsertVia(ctx, r, 5, 1, map[string]any{"amount": 51}); !errors.Is(err, fencing.ErrExists) {
		t.Fatalf("insert over a row: %v", err)
	}
	if err := tbl.UpsertVia(ctx, r, 4, 1, map[string]any{"amount": 40}); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("stale upsert: %v", err)
	}
	if err := tbl.CompareAndSetVia(ctx, r, 1, 0, map[string]any{"amount": 55}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := tbl.UpsertVia(ctx, fencingpgx.Runner(tx), 6, 1, map[string]any{"amount": 60}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.DeleteVia(ctx, fencingpgx.Runner(tx), 7, 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tbl.UpsertVia(ctx, r, 6, 1, map[string]any{"amount": 1}); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("upsert after a newer delete: %v", err)
	}
	if got, want := row(), "amount=60 fence=7 deleted=1 version=3"; got != want {
		t.Fatalf("row %s, want %s", got, want)
	}
}
