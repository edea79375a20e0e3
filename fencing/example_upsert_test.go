package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencehq/fence/fencing"
)

// A row a lock holder may create, overwrite and delete, each in one
// statement that checks the token: no read first, no transaction. Delete
// leaves a tombstone that keeps the fence, so a paused holder that wakes up
// cannot bring the row back. (SQLite here; the same on Postgres and MySQL.)
func ExampleTable_Upsert() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fencing-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db"))
	defer db.Close()
	db.Exec(`CREATE TABLE totals (restaurant_id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)`)
	totals, _ := fencing.NewTable(fencing.TableConfig{Dialect: fencing.SQLite, Name: "totals",
		Key: []string{"restaurant_id"}, DeletedColumn: "deleted"})
	if err := totals.EnsureColumn(ctx, db); err != nil { // fence and deleted, BIGINT NOT NULL DEFAULT 0
		fmt.Println(err)
		return
	}

	fmt.Println("token 33 creates:", totals.Upsert(ctx, db, 33, 77, map[string]any{"amount": 41000}))
	fmt.Println("token 34 overwrites:", totals.Upsert(ctx, db, 34, 77, map[string]any{"amount": 42000}))
	err := totals.Upsert(ctx, db, 33, 77, map[string]any{"amount": 40000})
	fmt.Println("token 33 again:", errors.Is(err, fencing.ErrStale))
	fmt.Println("token 35 deletes:", totals.Delete(ctx, db, 35, 77))
	err = totals.Upsert(ctx, db, 34, 77, map[string]any{"amount": 1})
	fmt.Println("token 34 after the delete:", errors.Is(err, fencing.ErrStale))
	err = totals.Insert(ctx, db, 34, 77, map[string]any{"amount": 1})
	fmt.Println("token 34 inserts:", errors.Is(err, fencing.ErrStale))

	var amount, fence, deleted int64
	db.QueryRow(`SELECT amount, fence, deleted FROM totals WHERE restaurant_id = 77`).Scan(&amount, &fence, &deleted)
	fmt.Println("row:", amount, "fence", fence, "deleted", deleted)
	// Output:
	// token 33 creates: <nil>
	// token 34 overwrites: <nil>
	// token 33 again: true
	// token 35 deletes: <nil>
	// token 34 after the delete: true
	// token 34 inserts: true
	// row: 42000 fence 35 deleted 1
}

// Optimistic concurrency, no lock at all: read the row and its version,
// compute, write only if the version is still the one read. The loser of a
// race gets ErrConflict and nothing is written; it reads again and retries.
func ExampleTable_CompareAndSet() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fencing-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db"))
	defer db.Close()
	db.Exec(`CREATE TABLE stock (sku TEXT PRIMARY KEY, left_ INTEGER NOT NULL, version INTEGER NOT NULL DEFAULT 0)`)
	db.Exec(`INSERT INTO stock (sku, left_) VALUES ('mug', 10)`)
	stock, _ := fencing.NewTable(fencing.TableConfig{Dialect: fencing.SQLite, Name: "stock",
		Key: []string{"sku"}, VersionColumn: "version"})

	read := func() (left, version int64) {
		db.QueryRow(`SELECT left_, version FROM stock WHERE sku = 'mug'`).Scan(&left, &version)
		return left, version
	}
	// Two buyers read the same row.
	leftA, versionA := read()
	leftB, versionB := read()
	fmt.Println("A takes 1:", stock.CompareAndSet(ctx, db, "mug", versionA, map[string]any{"left_": leftA - 1}))
	err := stock.CompareAndSet(ctx, db, "mug", versionB, map[string]any{"left_": leftB - 2})
	var conflict *fencing.ConflictError
	if errors.As(err, &conflict) {
		fmt.Printf("B takes 2: conflict (version %d, read %d): read again\n", conflict.Actual, conflict.Expected)
	}
	leftB, versionB = read()
	fmt.Println("B takes 2:", stock.CompareAndSet(ctx, db, "mug", versionB, map[string]any{"left_": leftB - 2}))
	left, version := read()
	fmt.Println("left:", left, "version", version)
	// Output:
	// A takes 1: <nil>
	// B takes 2: conflict (version 1, read 0): read again
	// B takes 2: <nil>
	// left: 7 version 2
}
