package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// setup creates a table (id, amount, note) with one row id=1 on db, adds the
// fence column with the schema helper (twice: it is idempotent), and returns
// a Table for it.
func setup(t *testing.T, db dbtest.DB, suffixes ...string) (*sql.DB, *fencing.Table, string) {
	t.Helper()
	h := dbtest.Open(t, db)
	name := dbtest.Table(t, h, suffixes...)
	mustExec(t, h, fmt.Sprintf("CREATE TABLE %s (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL, note VARCHAR(100))", name))
	mustExec(t, h, fmt.Sprintf("INSERT INTO %s (id, amount, note) VALUES (1, 0, 'new')", name))
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := tbl.EnsureColumn(context.Background(), h); err != nil {
			t.Fatalf("EnsureColumn (call %d): %v", i+1, err)
		}
	}
	return h, tbl, name
}

func mustExec(t *testing.T, h *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := h.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func row(t *testing.T, h *sql.DB, table string, id int) (amount, fence int64) {
	t.Helper()
	if err := h.QueryRow(fmt.Sprintf("SELECT amount, fence FROM %s WHERE id = %d", table, id)).Scan(&amount, &fence); err != nil {
		t.Fatal(err)
	}
	return amount, fence
}

func forEachDB(t *testing.T, fn func(t *testing.T, db dbtest.DB)) {
	for _, db := range dbtest.All(t) {
		t.Run(db.Name, func(t *testing.T) { fn(t, db) })
	}
}

// forEachDBAndFoundRows is forEachDB, then MySQL again with clientFoundRows
// in its DSN (dbtest.MySQLFoundRows), for code whose outcome must not
// depend on what MySQL counts as affected rows.
func forEachDBAndFoundRows(t *testing.T, fn func(t *testing.T, db dbtest.DB)) {
	forEachDB(t, fn)
	t.Run("mysql_clientFoundRows", func(t *testing.T) { fn(t, dbtest.MySQLFoundRows()) })
}

func TestGuardedUpdate(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, tbl, name := setup(t, db)
		ctx := context.Background()
		write := func(tok fencing.Token, amount int) error {
			return tbl.Update(ctx, h, tok, 1, map[string]any{"amount": amount, "note": fmt.Sprint("by ", tok)})
		}
		if err := write(5, 500); err != nil {
			t.Fatalf("first write: %v", err)
		}
		if a, f := row(t, h, name, 1); a != 500 || f != 5 {
			t.Fatalf("after token 5: amount %d fence %d", a, f)
		}
		// Equal token: the holder may write again, even the identical row.
		if err := write(5, 500); err != nil {
			t.Fatalf("identical rewrite with an equal token: %v", err)
		}
		if err := write(5, 510); err != nil {
			t.Fatalf("second write with an equal token: %v", err)
		}
		// Stale token: refused, nothing changes, both tokens reported.
		err := write(4, 400)
		var se *fencing.StaleError
		if !errors.Is(err, fencing.ErrStale) || !errors.As(err, &se) || se.Offered != 4 || se.Highest != 5 {
			t.Fatalf("stale write: %v", err)
		}
		if a, f := row(t, h, name, 1); a != 510 || f != 5 {
			t.Fatalf("a stale write changed the row: amount %d fence %d", a, f)
		}
		// Higher token: accepted and recorded.
		if err := write(9, 900); err != nil {
			t.Fatal(err)
		}
		if a, f := row(t, h, name, 1); a != 900 || f != 9 {
			t.Fatalf("after token 9: amount %d fence %d", a, f)
		}
		// Missing row: reported as such, not as stale.
		err = tbl.Update(ctx, h, 9, 2, map[string]any{"amount": 1})
		if !errors.Is(err, fencing.ErrNoRow) || errors.Is(err, fencing.ErrStale) {
			t.Fatalf("missing row: %v", err)
		}
		// Misuse is refused before any SQL runs.
		if err := tbl.Update(ctx, h, 10, 1, map[string]any{"fence": 0}); err == nil {
			t.Fatal("setting the fence column by hand was accepted")
		}
		if err := tbl.Update(ctx, h, 10, 1, map[string]any{"amount; DROP TABLE x": 0}); err == nil {
			t.Fatal("a bad column name was accepted")
		}
		if err := tbl.Update(ctx, h, 10, fencing.Key{1, 2}, map[string]any{"amount": 0}); err == nil {
			t.Fatal("a key of the wrong length was accepted")
		}
	})
}

// auditTrigger records every update of table's row into table_audit, by the
// database itself: the fence before and after, and the amount written.
func auditTrigger(t *testing.T, h *sql.DB, db dbtest.DB, table string) {
	audit := table + "_audit"
	mustExec(t, h, fmt.Sprintf("CREATE TABLE %s (old_fence BIGINT, new_fence BIGINT, amount BIGINT)", audit))
	switch db.Name {
	case "postgres":
		mustExec(t, h, fmt.Sprintf(`CREATE FUNCTION %[1]s_fn() RETURNS trigger AS $$ BEGIN
			INSERT INTO %[2]s VALUES (OLD.fence, NEW.fence, NEW.amount); RETURN NEW; END $$ LANGUAGE plpgsql`, table, audit))
		t.Cleanup(func() { h.Exec(fmt.Sprintf("DROP FUNCTION IF EXISTS %s_fn() CASCADE", table)) })
		mustExec(t, h, fmt.Sprintf("CREATE TRIGGER %[1]s_tr AFTER UPDATE ON %[1]s FOR EACH ROW EXECUTE FUNCTION %[1]s_fn()", table))
	case "mysql":
		mustExec(t, h, fmt.Sprintf("CREATE TRIGGER %[1]s_tr AFTER UPDATE ON %[1]s FOR EACH ROW INSERT INTO %[2]s VALUES (OLD.fence, NEW.fence, NEW.amount)", table, audit))
	case "sqlite":
		mustExec(t, h, fmt.Sprintf("CREATE TRIGGER %[1]s_tr AFTER UPDATE ON %[1]s BEGIN INSERT INTO %[2]s VALUES (OLD.fence, NEW.fence, NEW.amount); END", table, audit))
	}
}

// TestConcurrentWriters: 16 goroutines write one row with a mix of tokens.
// The database's own audit log (a trigger) must show that no write ever
// lowered the fence, and the final row must hold the highest token's value.
func TestConcurrentWriters(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, tbl, name := setup(t, db, "audit")
		auditTrigger(t, h, db, name)
		ctx := context.Background()
		const writers, perWriter = 16, 25
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			accepted int
			stale    int
			maxTok   fencing.Token
		)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWriter; i++ {
					tok := fencing.Token((w*7+i*13)%60 + 1) // a spread of tokens, out of order
					err := tbl.Update(ctx, h, tok, 1, map[string]any{"amount": int64(tok) * 10})
					mu.Lock()
					switch {
					case err == nil:
						accepted++
					case errors.Is(err, fencing.ErrStale):
						stale++
					default:
						t.Errorf("write with token %d: %v", tok, err)
					}
					maxTok = max(maxTok, tok)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		amount, fence := row(t, h, name, 1)
		if fencing.Token(fence) != maxTok || amount != int64(maxTok)*10 {
			t.Fatalf("final row: amount %d fence %d; want the highest token %d's value", amount, fence, maxTok)
		}
		rows, err := h.Query(fmt.Sprintf("SELECT old_fence, new_fence, amount FROM %s_audit", name))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		updates := 0
		for rows.Next() {
			var oldF, newF, amt int64
			if err := rows.Scan(&oldF, &newF, &amt); err != nil {
				t.Fatal(err)
			}
			updates++
			if newF < oldF {
				t.Errorf("the database recorded a write with token %d over token %d", newF, oldF)
			}
			if amt != newF*10 {
				t.Errorf("the database recorded amount %d with token %d", amt, newF)
			}
		}
		if updates == 0 || stale == 0 {
			t.Fatalf("the test did not exercise both outcomes: %d updates recorded, %d stale", updates, stale)
		}
		t.Logf("%d writes: %d accepted, %d refused as stale; %d updates in the audit log", writers*perWriter, accepted, stale, updates)
	})
}

type countingObserver struct {
	mu    sync.Mutex
	calls []string
}

func (o *countingObserver) Stale(table string, mode fencing.Mode, offered, highest fencing.Token) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s %d<%d", mode, offered, highest))
}

// bareTable creates a table (id, amount) without a fence column, with the
// row id=1.
func bareTable(t *testing.T, db dbtest.DB) (*sql.DB, string) {
	t.Helper()
	h := dbtest.Open(t, db)
	name := dbtest.Table(t, h)
	mustExec(t, h, fmt.Sprintf("CREATE TABLE %s (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL)", name))
	mustExec(t, h, fmt.Sprintf("INSERT INTO %s VALUES (1, 0)", name))
	return h, name
}

func TestRolloutModes(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, name := bareTable(t, db)
		ctx := context.Background()
		obs := &countingObserver{}
		tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}, Mode: fencing.Off, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		// Step 1, off: writes work before the column exists.
		if err := tbl.Update(ctx, h, 3, 1, map[string]any{"amount": 30}); err != nil {
			t.Fatalf("off mode without a fence column: %v", err)
		}
		if err := tbl.Update(ctx, h, 3, 2, map[string]any{"amount": 30}); !errors.Is(err, fencing.ErrNoRow) {
			t.Fatalf("off mode, missing row: %v", err)
		}
		// Step 2, observe: add the column, record tokens, let stale writes through but count them.
		if err := tbl.EnsureColumn(ctx, h); err != nil {
			t.Fatal(err)
		}
		tbl.SetMode(fencing.Observe)
		if err := tbl.Update(ctx, h, 10, 1, map[string]any{"amount": 100}); err != nil {
			t.Fatal(err)
		}
		if err := tbl.Update(ctx, h, 5, 1, map[string]any{"amount": 50}); err != nil {
			t.Fatalf("observe mode refused a stale write: %v", err)
		}
		if a, f := row(t, h, name, 1); a != 50 || f != 10 {
			t.Fatalf("observe mode: amount %d fence %d; want the stale write through and the fence kept at 10", a, f)
		}
		// Step 3, enforce: switched at run time, refused.
		tbl.SetMode(fencing.Enforce)
		if err := tbl.Update(ctx, h, 5, 1, map[string]any{"amount": 55}); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("enforce mode: %v", err)
		}
		if a, _ := row(t, h, name, 1); a != 50 {
			t.Fatalf("enforce mode let a stale write change the row: %d", a)
		}
		if got := fmt.Sprint(obs.calls); got != "[observe 5<10 enforce 5<10]" {
			t.Fatalf("observer saw %s", got)
		}
	})
}

func TestInTx(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, tbl, name := setup(t, db)
		ctx := context.Background()
		mustExec(t, h, fmt.Sprintf("INSERT INTO %s (id, amount, note) VALUES (2, 0, 'new')", name))
		// Several statements under one check.
		err := tbl.InTx(ctx, h, 5, 1, func(tx *sql.Tx) error {
			if _, err := tx.Exec(fmt.Sprintf("UPDATE %s SET amount = 100 WHERE id = 1", name)); err != nil {
				return err
			}
			_, err := tx.Exec(fmt.Sprintf("UPDATE %s SET amount = 200 WHERE id = 2", name))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if a, f := row(t, h, name, 1); a != 100 || f != 5 {
			t.Fatalf("after InTx: %d %d", a, f)
		}
		// A stale token never runs fn.
		ran := false
		err = tbl.InTx(ctx, h, 4, 1, func(tx *sql.Tx) error { ran = true; return nil })
		if !errors.Is(err, fencing.ErrStale) || ran {
			t.Fatalf("stale InTx: %v, fn ran: %v", err, ran)
		}
		// fn's error rolls back everything, the token claim included.
		boom := errors.New("boom")
		err = tbl.InTx(ctx, h, 8, 1, func(tx *sql.Tx) error {
			tx.Exec(fmt.Sprintf("UPDATE %s SET amount = 999 WHERE id = 2", name))
			return boom
		})
		if err != boom { // fn's error as it is
			t.Fatalf("InTx error: %v", err)
		}
		if a, f := row(t, h, name, 1); a != 100 || f != 5 {
			t.Fatalf("row 1 after rollback: %d %d", a, f)
		}
		if a, _ := row(t, h, name, 2); a != 200 {
			t.Fatalf("row 2 after rollback: %d", a)
		}
		// fn that ends the transaction itself and fails: its error, nothing about the closed tx.
		err = tbl.InTx(ctx, h, 8, 1, func(tx *sql.Tx) error { tx.Rollback(); return boom })
		if !errors.Is(err, boom) || errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("InTx whose fn rolled back: %v", err)
		}
	})
}

func TestModeText(t *testing.T) {
	for _, m := range []fencing.Mode{fencing.Off, fencing.Observe, fencing.Enforce} {
		b, _ := m.MarshalText()
		var back fencing.Mode
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Fatalf("%v round trip: %v %v", m, back, err)
		}
	}
	var m fencing.Mode
	if err := m.UnmarshalText([]byte("on")); err == nil {
		t.Fatal("accepted mode \"on\"")
	}
}

// isolationLevels lists the levels each database is tested under.
func isolationLevels(db dbtest.DB) []sql.IsolationLevel {
	switch db.Name {
	case "sqlite": // always serializable; the driver takes only the default
		return []sql.IsolationLevel{sql.LevelDefault}
	case "mysql": // SERIALIZABLE turns the caller's read into a shared lock: the newer holder waits for the caller's commit
		return []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead}
	}
	return []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}
}

// refusedInTx reports whether err is an acceptable refusal of a stale write
// made inside the caller's transaction: ErrStale everywhere; on Postgres under
// REPEATABLE READ or SERIALIZABLE also a serialization failure (40001), and on
// SQLite a busy snapshot (the transaction read before the newer write). A nil
// error never is.
func refusedInTx(db dbtest.DB, iso sql.IsolationLevel, err error) bool {
	if errors.Is(err, fencing.ErrStale) {
		return true
	}
	var pgErr *pgconn.PgError
	if db.Name == "postgres" && iso >= sql.LevelRepeatableRead && errors.As(err, &pgErr) {
		return pgErr.Code == "40001"
	}
	var liteErr *sqlite.Error
	if db.Name == "sqlite" && errors.As(err, &liteErr) {
		return liteErr.Code()&0xff == sqlite3.SQLITE_BUSY
	}
	return false
}

// TestStaleInCallersTx: the caller's transaction reads the row, a newer
// holder writes it and commits, then the older holder writes through the
// caller's transaction. The write must be refused (and the caller's commit
// must not land it), whatever the isolation level, and whatever the older
// holder's own token last wrote (equal to the row's fence in the snapshot,
// or below it).
func TestStaleInCallersTx(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		for _, iso := range isolationLevels(db) {
			for _, tc := range []struct {
				name   string
				before fencing.Token // the fence when the caller's transaction reads
				write  func(tbl *fencing.Table, tx *sql.Tx) error
			}{
				{"update/snapshot-equal", 5, func(tbl *fencing.Table, tx *sql.Tx) error {
					return tbl.Update(context.Background(), tx, 5, 1, map[string]any{"amount": 500})
				}},
				{"update/snapshot-lower", 3, func(tbl *fencing.Table, tx *sql.Tx) error {
					return tbl.Update(context.Background(), tx, 5, 1, map[string]any{"amount": 500})
				}},
				{"claim/snapshot-equal", 5, func(tbl *fencing.Table, tx *sql.Tx) error {
					return tbl.Claim(context.Background(), tx, 5, 1)
				}},
				{"update-via/snapshot-equal", 5, func(tbl *fencing.Table, tx *sql.Tx) error {
					return tbl.UpdateVia(context.Background(), fencing.SQL(tx), 5, 1, map[string]any{"amount": 500})
				}},
			} {
				t.Run(fmt.Sprintf("%v/%s", iso, tc.name), func(t *testing.T) {
					h, tbl, name := setup(t, db)
					ctx := context.Background()
					if err := tbl.Update(ctx, h, tc.before, 1, map[string]any{"amount": int64(tc.before) * 100}); err != nil {
						t.Fatal(err)
					}
					tx, err := h.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback()
					var amount int64 // the read of a read-modify-write
					if err := tx.QueryRow(fmt.Sprintf("SELECT amount FROM %s WHERE id = 1", name)).Scan(&amount); err != nil {
						t.Fatal(err)
					}
					if err := tbl.Update(ctx, h, 6, 1, map[string]any{"amount": 600}); err != nil {
						t.Fatalf("the newer holder's write: %v", err)
					}
					err = tc.write(tbl, tx)
					if !refusedInTx(db, iso, err) {
						t.Errorf("stale write (token 5 after 6) inside the caller's transaction: %v; want ErrStale", err)
					}
					tx.Commit() // the caller ignores the error and commits anyway
					if a, f := row(t, h, name, 1); a != 600 || f != 6 {
						t.Fatalf("after the caller's commit: amount %d fence %d; want token 6's write (600, 6)", a, f)
					}
				})
			}
		}
	})
}

// TestEnsureColumnQualified: the schema helper on a schema-qualified name,
// and on a table that does not exist.
func TestEnsureColumnQualified(t *testing.T) {
	schema := map[string]string{"postgres": "public", "mysql": "test", "sqlite": "main"}
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, name := bareTable(t, db)
		ctx := context.Background()
		tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: schema[db.Name] + "." + name, Key: []string{"id"}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := tbl.EnsureColumn(ctx, h); err != nil {
				t.Fatalf("EnsureColumn on %s.%s (call %d): %v", schema[db.Name], name, i+1, err)
			}
		}
		if err := tbl.Update(ctx, h, 3, 1, map[string]any{"amount": 30}); err != nil {
			t.Fatal(err)
		}
		missing, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name + "_missing", Key: []string{"id"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := missing.EnsureColumn(ctx, h); err == nil {
			t.Fatal("EnsureColumn on a table that does not exist: no error")
		}
	})
}
