package pglease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/fencehq/fence/client/pglease"
	"github.com/fencehq/fence/fencing"
)

// A lease and its fencing token from the same Postgres that holds the data,
// and fencing.Table guarding a row with the token: the holder whose lease
// ran out is refused once the next holder has written. (Runs against the
// Postgres at 127.0.0.1:5432.)
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	const leases = "fence_example_lease"
	cleanUp := func() {
		db.Exec(`DROP TABLE IF EXISTS fence_example_totals`)
		db.Exec(`DROP TABLE IF EXISTS ` + leases)
		db.Exec(`DROP SEQUENCE IF EXISTS ` + leases + `_token`)
	}
	cleanUp()
	defer cleanUp()

	// Once, at start-up: the lease table and token sequence, and a table
	// whose rows carry a fence column.
	if err := pglease.EnsureSchema(ctx, db, pglease.WithTable(leases)); err != nil {
		fmt.Println(err)
		return
	}
	db.Exec(`CREATE TABLE fence_example_totals (restaurant_id int PRIMARY KEY, amount bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)`)
	db.Exec(`INSERT INTO fence_example_totals (restaurant_id, amount) VALUES (77, 0)`)
	totals, _ := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: "fence_example_totals", Key: []string{"restaurant_id"}})
	locks := pglease.New(db, pglease.WithTable(leases), pglease.WithTTL(10*time.Second))

	a, err := locks.TryLock(ctx, "totals/77")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("A writes:", totals.Update(ctx, db, a.Token(), 77, map[string]any{"amount": 41000}))
	_, err = locks.TryLock(ctx, "totals/77")
	fmt.Println("B is refused the lock:", errors.Is(err, pglease.ErrLocked))

	// A stalls past its TTL. (Here the database is told so directly; in
	// life, the database's clock passes A's expiry while A is paused.)
	db.Exec(`UPDATE ` + leases + ` SET expires_at = clock_timestamp() - interval '1 second' WHERE name = 'totals/77'`)

	b, err := locks.TryLock(ctx, "totals/77")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Release(ctx)
	fmt.Println("B's token is larger:", b.Token() > a.Token())
	fmt.Println("B writes:", totals.Update(ctx, db, b.Token(), 77, map[string]any{"amount": 42000}))

	// A wakes up and writes, with its old token, without looking: refused.
	err = totals.Update(ctx, db, a.Token(), 77, map[string]any{"amount": 40000})
	fmt.Println("A's late write is refused:", errors.Is(err, fencing.ErrStale))
	var amount int64
	db.QueryRow(`SELECT amount FROM fence_example_totals WHERE restaurant_id = 77`).Scan(&amount)
	fmt.Println("row 77:", amount)
	fmt.Println("A's Release says it lost the lock:", errors.Is(a.Release(ctx), pglease.ErrLost))
	// Output:
	// A writes: <nil>
	// B is refused the lock: true
	// B's token is larger: true
	// B writes: <nil>
	// A's late write is refused: true
	// row 77: 42000
	// A's Release says it lost the lock: true
}
