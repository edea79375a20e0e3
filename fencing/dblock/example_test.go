package dblock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/dblock"
	"github.com/fencehq/fence/internal/dbtest"
)

// Move money between two accounts under advisory locks on both: every
// transfer names the accounts in its own order, InTx locks them in one
// order, so two opposite transfers queue instead of deadlocking.
func ExampleInTx() {
	ctx := context.Background()
	// postgres://postgres@127.0.0.1:5432/test (or $FENCE_TEST_POSTGRES_DSN)
	db, err := sql.Open("pgx", dbtest.Postgres().DSN)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	o := dblock.Options{Timeout: 500 * time.Millisecond, IdleTimeout: 5 * time.Second}
	err = dblock.InTx(ctx, db, o, []string{"example/account/9", "example/account/7"}, func(tx *sql.Tx) error {
		var lt, it string
		if err := tx.QueryRowContext(ctx, "SELECT current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&lt, &it); err != nil {
			return err
		}
		fmt.Println("inside: lock_timeout", lt, "idle_in_transaction_session_timeout", it)
		// Another transaction that will not wait is refused at once.
		err := dblock.InTx(ctx, db, dblock.Options{Wait: dblock.NoWait}, []string{"example/account/7"}, func(*sql.Tx) error { return nil })
		fmt.Println("another transaction:", errors.Is(err, dblock.ErrNotAvailable))
		return nil // commit; the locks end with the transaction
	})
	fmt.Println("transfer:", err)
	// Output:
	// inside: lock_timeout 500ms idle_in_transaction_session_timeout 5s
	// another transaction: true
	// transfer: <nil>
}

// Workers take jobs from a queue table: SKIP LOCKED passes over a job
// another worker has locked instead of waiting for it.
func ExampleLockRow() {
	ctx := context.Background()
	db, err := sql.Open("pgx", dbtest.Postgres().DSN)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	defer db.ExecContext(ctx, "DROP TABLE example_jobs")
	db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS example_jobs (id INT PRIMARY KEY)")
	db.ExecContext(ctx, "INSERT INTO example_jobs VALUES (1), (2) ON CONFLICT DO NOTHING")

	worker1, _ := db.BeginTx(ctx, nil)
	defer worker1.Rollback()
	found, err := dblock.LockRow(ctx, fencing.SQL(worker1), dblock.Options{Wait: dblock.SkipLocked}, "example_jobs", []string{"id"}, 1)
	fmt.Println("worker 1 takes job 1:", found, err)

	worker2, _ := db.BeginTx(ctx, nil)
	defer worker2.Rollback()
	for _, id := range []int{1, 2} {
		found, err := dblock.LockRow(ctx, fencing.SQL(worker2), dblock.Options{Wait: dblock.SkipLocked}, "example_jobs", []string{"id"}, id)
		fmt.Printf("worker 2 takes job %d: %v %v\n", id, found, err)
	}
	// Output:
	// worker 1 takes job 1: true <nil>
	// worker 2 takes job 1: false <nil>
	// worker 2 takes job 2: true <nil>
}
