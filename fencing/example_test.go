package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/fencehq/fence/fencing"
)

// Add fencing to an existing table in three steps, without a big bang.
// (SQLite here so the example runs anywhere; use fencing.Postgres or
// fencing.MySQL with your database.)
func Example_rollout() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fencing-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db"))
	defer db.Close()
	// The existing table, and its writer.
	db.Exec(`CREATE TABLE totals (restaurant_id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)`)
	db.Exec(`INSERT INTO totals VALUES (77, 0)`)

	// Step 1 — off: route every writer through the Table, passing the token
	// of its lock grant. Nothing is checked yet; the column need not exist.
	totals, _ := fencing.NewTable(fencing.TableConfig{
		Dialect: fencing.SQLite, Name: "totals", Key: []string{"restaurant_id"}, Mode: fencing.Off})
	err := totals.Update(ctx, db, 33, 77, map[string]any{"amount": 41000})
	fmt.Println("off:", err)

	// Step 2 — observe: add the fence column (idempotent; run it at start-up),
	// then switch to observe at run time. Writes record their token; a stale
	// one still goes through but is counted and logged with both tokens.
	if err := totals.EnsureColumn(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	totals.SetMode(fencing.Observe)
	fmt.Println("observe, token 34:", totals.Update(ctx, db, 34, 77, map[string]any{"amount": 42000}))
	// (a paused holder with token 33 would be let through here, and reported)

	// Step 3 — enforce: once observe mode reports no stale writes you did not
	// expect, refuse them.
	totals.SetMode(fencing.Enforce)
	err = totals.Update(ctx, db, 33, 77, map[string]any{"amount": 40000})
	var stale *fencing.StaleError
	if errors.As(err, &stale) {
		fmt.Printf("enforce, token 33: refused (%d < %d): stop, re-acquire, read fresh data\n", stale.Offered, stale.Highest)
	}
	var amount, fence int64
	db.QueryRow(`SELECT amount, fence FROM totals WHERE restaurant_id = 77`).Scan(&amount, &fence)
	fmt.Println("row:", amount, "written with token", fence)
	// Output:
	// off: <nil>
	// observe, token 34: <nil>
	// enforce, token 33: refused (33 < 34): stop, re-acquire, read fresh data
	// row: 42000 written with token 34
}
