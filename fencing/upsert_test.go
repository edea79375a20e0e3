package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// tombTable creates an empty table (id, amount, note) whose Table keeps
// tombstones (deleted) and a version, with the columns added by
// EnsureColumn (twice: it is idempotent).
func tombTable(t *testing.T, db dbtest.DB, cfg fencing.TableConfig, suffixes ...string) (*sql.DB, *fencing.Table, string) {
	t.Helper()
	h := dbtest.Open(t, db)
	name := dbtest.Table(t, h, suffixes...)
	mustExec(t, h, fmt.Sprintf("CREATE TABLE %s (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL DEFAULT 0, note VARCHAR(100))", name))
	cfg.Dialect, cfg.Name, cfg.Key, cfg.DeletedColumn, cfg.VersionColumn = db.Dialect, name, []string{"id"}, "deleted", "version"
	tbl, err := fencing.NewTable(cfg)
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

// state is a row as stored, "none" if there is none.
func state(t *testing.T, h *sql.DB, table string, id int) string {
	t.Helper()
	var amount, fence, deleted, version int64
	var note sql.NullString
	err := h.QueryRow(fmt.Sprintf("SELECT amount, note, fence, deleted, version FROM %s WHERE id = %d", table, id)).Scan(&amount, &note, &fence, &deleted, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return "none"
	}
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("amount=%d note=%s fence=%d deleted=%d version=%d", amount, note.String, fence, deleted, version)
}

// outcome names an error by the sentinel it matches.
func outcome(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{{fencing.ErrStale, "stale"}, {fencing.ErrExists, "exists"}, {fencing.ErrNoRow, "norow"}, {fencing.ErrConflict, "conflict"},
		{fencing.ErrTooHigh, "toohigh"}, {fencing.ErrBadSignature, "badsig"}} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	if err != nil {
		return "error"
	}
	return "ok"
}

// TestInsertUpsertDelete: one row's life through the guarded writes, with
// the stored row after each step.
func TestInsertUpsertDelete(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, tbl, name := tombTable(t, db, fencing.TableConfig{})
		ctx := context.Background()
		ins := func(tok fencing.Token, amount int) func() error {
			return func() error {
				return tbl.Insert(ctx, h, tok, 1, map[string]any{"amount": amount, "note": fmt.Sprint("i", tok)})
			}
		}
		ups := func(tok fencing.Token, amount int) func() error {
			return func() error {
				return tbl.Upsert(ctx, h, tok, 1, map[string]any{"amount": amount, "note": fmt.Sprint("u", tok)})
			}
		}
		del := func(tok fencing.Token) func() error { return func() error { return tbl.Delete(ctx, h, tok, 1) } }
		upd := func(tok fencing.Token, amount int) func() error {
			return func() error { return tbl.Update(ctx, h, tok, 1, map[string]any{"amount": amount}) }
		}
		cas := func(version int64, amount int) func() error {
			return func() error { return tbl.CompareAndSet(ctx, h, 1, version, map[string]any{"amount": amount}) }
		}
		for i, step := range []struct {
			name, want, row string
			do              func() error
		}{
			{"update of no row", "norow", "none", upd(5, 1)},
			{"delete of no row", "norow", "none", del(5)},
			{"cas of no row", "norow", "none", cas(0, 1)},
			{"insert creates", "ok", "amount=50 note=i5 fence=5 deleted=0 version=0", ins(5, 50)},
			{"insert again, same token", "exists", "amount=50 note=i5 fence=5 deleted=0 version=0", ins(5, 51)},
			{"insert again, newer token", "exists", "amount=50 note=i5 fence=5 deleted=0 version=0", ins(6, 60)},
			{"insert again, older token", "stale", "amount=50 note=i5 fence=5 deleted=0 version=0", ins(4, 40)},
			{"upsert, same token", "ok", "amount=55 note=u5 fence=5 deleted=0 version=1", ups(5, 55)},
			{"upsert, same token, same values", "ok", "amount=55 note=u5 fence=5 deleted=0 version=2", ups(5, 55)},
			{"upsert, older token", "stale", "amount=55 note=u5 fence=5 deleted=0 version=2", ups(4, 40)},
			{"upsert, newer token", "ok", "amount=70 note=u7 fence=7 deleted=0 version=3", ups(7, 70)},
			{"update, newer token", "ok", "amount=80 note=u7 fence=8 deleted=0 version=4", upd(8, 80)},
			{"cas, stale version", "conflict", "amount=80 note=u7 fence=8 deleted=0 version=4", cas(3, 1)},
			{"cas, current version", "ok", "amount=81 note=u7 fence=8 deleted=0 version=5", cas(4, 81)},
			{"delete, older token", "stale", "amount=81 note=u7 fence=8 deleted=0 version=5", del(7)},
			{"delete, newer token", "ok", "amount=81 note=u7 fence=9 deleted=1 version=6", del(9)},
			{"delete again, same token", "ok", "amount=81 note=u7 fence=9 deleted=1 version=7", del(9)},
			{"update of a tombstone", "norow", "amount=81 note=u7 fence=9 deleted=1 version=7", upd(10, 1)},
			{"update of a tombstone, older token", "stale", "amount=81 note=u7 fence=9 deleted=1 version=7", upd(8, 1)},
			{"cas of a tombstone", "norow", "amount=81 note=u7 fence=9 deleted=1 version=7", cas(7, 1)},
			{"upsert after a newer delete", "stale", "amount=81 note=u7 fence=9 deleted=1 version=7", ups(8, 1)},
			{"insert after a newer delete", "stale", "amount=81 note=u7 fence=9 deleted=1 version=7", ins(8, 1)},
			{"insert revives, same token", "ok", "amount=90 note=i9 fence=9 deleted=0 version=8", ins(9, 90)},
			{"delete, newer token", "ok", "amount=90 note=i9 fence=10 deleted=1 version=9", del(10)},
			{"upsert revives, newer token", "ok", "amount=110 note=u11 fence=11 deleted=0 version=10", ups(11, 110)},
		} {
			err := step.do()
			if got := outcome(err); got != step.want {
				t.Fatalf("step %d, %s: %v (%s), want %s", i, step.name, err, got, step.want)
			}
			if got := state(t, h, name, 1); got != step.row {
				t.Fatalf("step %d, %s: row %s, want %s", i, step.name, got, step.row)
			}
		}
	})
}

// TestGuardedWriteRefusals: each refusal, on a row as given, changes
// nothing: not the row, not the table's other rows, and the error says why.
func TestGuardedWriteRefusals(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, tbl, name := tombTable(t, db, fencing.TableConfig{Limit: fencing.Limit{Max: 1000, MaxJump: 100}})
		ctx := context.Background()
		plain, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}})
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := newKey(t)
		signed, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}, DeletedColumn: "deleted", VersionColumn: "version",
			Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "t/" + k[0] }})
		if err != nil {
			t.Fatal(err)
		}
		// Row 1 live at token 50, row 2 a tombstone at token 50.
		if err := tbl.Insert(ctx, h, 50, 1, map[string]any{"amount": 1, "note": "one"}); err != nil {
			t.Fatal(err)
		}
		if err := tbl.Insert(ctx, h, 50, 2, map[string]any{"amount": 2, "note": "two"}); err != nil {
			t.Fatal(err)
		}
		if err := tbl.Delete(ctx, h, 50, 2); err != nil {
			t.Fatal(err)
		}
		const (
			row1 = "amount=1 note=one fence=50 deleted=0 version=0"
			row2 = "amount=2 note=two fence=50 deleted=1 version=1"
		)
		set := map[string]any{"amount": 9}
		for _, tc := range []struct {
			name, want string
			do         func() error
		}{
			{"insert over a live row", "exists", func() error { return tbl.Insert(ctx, h, 50, 1, set) }},
			{"insert over a live row, older token", "stale", func() error { return tbl.Insert(ctx, h, 49, 1, set) }},
			{"insert over a newer tombstone", "stale", func() error { return tbl.Insert(ctx, h, 49, 2, set) }},
			{"upsert, older token", "stale", func() error { return tbl.Upsert(ctx, h, 49, 1, set) }},
			{"upsert over a newer tombstone", "stale", func() error { return tbl.Upsert(ctx, h, 49, 2, set) }},
			{"delete, older token", "stale", func() error { return tbl.Delete(ctx, h, 49, 1) }},
			{"delete of a newer tombstone", "stale", func() error { return tbl.Delete(ctx, h, 49, 2) }},
			{"delete of no row", "norow", func() error { return tbl.Delete(ctx, h, 60, 3) }},
			{"update of a tombstone", "norow", func() error { return tbl.Update(ctx, h, 60, 2, set) }},
			{"cas, old version", "conflict", func() error { return tbl.CompareAndSet(ctx, h, 1, 1, set) }},
			{"cas of a tombstone", "norow", func() error { return tbl.CompareAndSet(ctx, h, 2, 1, set) }},
			{"cas of no row", "norow", func() error { return tbl.CompareAndSet(ctx, h, 3, 0, set) }},
			{"insert above the limit", "toohigh", func() error { return tbl.Insert(ctx, h, 1001, 3, set) }},
			{"upsert far above the fence", "toohigh", func() error { return tbl.Upsert(ctx, h, 151, 1, set) }},
			{"upsert far above a tombstone's fence", "toohigh", func() error { return tbl.Upsert(ctx, h, 151, 2, set) }},
			{"insert far above a tombstone's fence", "toohigh", func() error { return tbl.Insert(ctx, h, 151, 2, set) }},
			{"delete far above the fence", "toohigh", func() error { return tbl.Delete(ctx, h, 151, 1) }},
			// A table that takes signed tokens only: plain ones and no token are refused.
			{"insert, signed-only table", "badsig", func() error { return signed.Insert(ctx, h, 60, 3, set) }},
			{"upsert, signed-only table", "badsig", func() error { return signed.Upsert(ctx, h, 60, 1, set) }},
			{"delete, signed-only table", "badsig", func() error { return signed.Delete(ctx, h, 60, 1) }},
			{"cas, signed-only table", "badsig", func() error { return signed.CompareAndSet(ctx, h, 1, 0, set) }},
			// Bad input: refused before any SQL runs.
			{"upsert sets the fence", "error", func() error { return tbl.Upsert(ctx, h, 60, 1, map[string]any{"fence": 1}) }},
			{"upsert sets the key", "error", func() error { return tbl.Upsert(ctx, h, 60, 1, map[string]any{"id": 3}) }},
			{"upsert revives by hand", "error", func() error { return tbl.Upsert(ctx, h, 60, 2, map[string]any{"deleted": 0}) }},
			{"update sets the version", "error", func() error { return tbl.Update(ctx, h, 60, 1, map[string]any{"version": 0}) }},
			{"cas sets the version", "error", func() error { return tbl.CompareAndSet(ctx, h, 1, 0, map[string]any{"version": 7}) }},
			{"insert, bad column", "error", func() error { return tbl.Insert(ctx, h, 60, 3, map[string]any{"amount; DROP TABLE x": 1}) }},
			{"upsert, key of the wrong length", "error", func() error { return tbl.Upsert(ctx, h, 60, fencing.Key{1, 2}, set) }},
			{"cas, negative version", "error", func() error { return tbl.CompareAndSet(ctx, h, 1, -1, set) }},
			{"delete without a DeletedColumn", "error", func() error { return plain.Delete(ctx, h, 60, 1) }},
			{"cas without a VersionColumn", "error", func() error { return plain.CompareAndSet(ctx, h, 1, 0, set) }},
			{"upsert, nil key", "error", func() error { return tbl.Upsert(ctx, h, 60, nil, set) }},
			{"insert, nil in a key", "error", func() error { return tbl.Insert(ctx, h, 60, fencing.Key{nil}, set) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.do()
				if got := outcome(err); got != tc.want {
					t.Fatalf("%v (%s), want %s", err, got, tc.want)
				}
				t.Log(err)
				if got := state(t, h, name, 1); got != row1 {
					t.Errorf("row 1 changed: %s, want %s", got, row1)
				}
				if got := state(t, h, name, 2); got != row2 {
					t.Errorf("row 2 changed: %s, want %s", got, row2)
				}
				if got := state(t, h, name, 3); got != "none" {
					t.Errorf("row 3 appeared: %s", got)
				}
				var n int
				if err := h.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s", name)).Scan(&n); err != nil || n != 2 {
					t.Errorf("%d rows (%v), want 2", n, err)
				}
			})
		}
	})
}

// TestTableConfigColumns: the deleted and version columns are checked and
// kept apart from the fence and the key.
func TestTableConfigColumns(t *testing.T) {
	for _, tc := range []struct {
		fence, deleted, version string
		key                     []string
		ok                      bool
	}{
		{"", "deleted", "version", []string{"id"}, true},
		{"", "", "", []string{"id"}, true},
		{"", "fence", "", []string{"id"}, false},
		{"", "", "fence", []string{"id"}, false},
		{"", "v", "v", []string{"id"}, false},
		{"", "deleted", "", []string{"id", "deleted"}, false},
		{"", "", "version", []string{"version"}, false},
		{"", "deleted; DROP", "", []string{"id"}, false},
		{"", "", "a.b.c", []string{"id"}, false},
		// MySQL and SQLite match column names without regard to case.
		{"", "Fence", "", []string{"id"}, false},
		{"", "v", "V", []string{"id"}, false},
		{"", "deleted", "", []string{"id", "DELETED"}, false},
	} {
		_, err := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: "t", Key: tc.key, FenceColumn: tc.fence, DeletedColumn: tc.deleted, VersionColumn: tc.version})
		if (err == nil) != tc.ok {
			t.Errorf("NewTable(deleted %q, version %q, key %q): %v, want ok=%v", tc.deleted, tc.version, tc.key, err, tc.ok)
		}
	}
}

// TestUpsertAffectedRows: MySQL counts a row an upsert left alone as 0
// rows: a same-value write by the current token must succeed and a stale
// one must be refused, on a table without a version column (whose step
// would make every write a change).
func TestUpsertAffectedRows(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		{
			h, tbl, name := setup(t, db)
			ctx := context.Background()
			same := map[string]any{"amount": 0, "note": "new"}
			for _, tok := range []fencing.Token{0, 5, 5} {
				if err := tbl.Upsert(ctx, h, tok, 1, same); err != nil {
					t.Fatalf("same-value upsert, token %d: %v", tok, err)
				}
			}
			if err := tbl.Upsert(ctx, h, 4, 1, same); !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("same-value upsert, stale token: %v", err)
			}
			if err := tbl.Upsert(ctx, h, 4, 1, map[string]any{"amount": 4}); !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("stale upsert: %v", err)
			}
			// The offered row must satisfy the table's constraints even
			// where the row exists: the database checks it first.
			if err := tbl.Upsert(ctx, h, 6, 1, nil); err == nil {
				t.Fatal("upsert without amount (NOT NULL, no default) was accepted")
			}
			if err := tbl.Upsert(ctx, h, 6, 1, same); err != nil {
				t.Fatalf("same-value upsert, newer token: %v", err)
			}
			if err := tbl.Upsert(ctx, h, 3, 2, map[string]any{"amount": 3}); err != nil {
				t.Fatalf("upsert of a new row: %v", err)
			}
			if err := tbl.Insert(ctx, h, 2, 2, map[string]any{"amount": 2}); !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("stale insert: %v", err)
			}
			if err := tbl.Insert(ctx, h, 4, 2, map[string]any{"amount": 2}); !errors.Is(err, fencing.ErrExists) {
				t.Fatalf("insert over a row: %v", err)
			}
			if a, f := row(t, h, name, 1); a != 0 || f != 6 {
				t.Fatalf("row 1: amount %d fence %d, want 0 6", a, f)
			}
			if a, f := row(t, h, name, 2); a != 3 || f != 3 {
				t.Fatalf("row 2: amount %d fence %d, want 3 3", a, f)
			}
		}
	})
}

// TestMySQLFoundRows: with clientFoundRows MySQL counts a row an upsert
// left alone as 1, as it does a new row. A refused write must never be
// reported as done: every Insert or Upsert that did not update a row fails
// with an error that says why; Update is unaffected.
func TestMySQLFoundRows(t *testing.T) {
	h, tbl, name := setup(t, dbtest.MySQLFoundRows())
	ctx := context.Background()
	if err := tbl.Update(ctx, h, 5, 1, map[string]any{"amount": 50}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Update(ctx, h, 5, 1, map[string]any{"amount": 50}); err != nil {
		t.Fatalf("identical rewrite: %v", err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"stale upsert", func() error { return tbl.Upsert(ctx, h, 4, 1, map[string]any{"amount": 40}) }},
		{"stale same-value upsert", func() error { return tbl.Upsert(ctx, h, 4, 1, map[string]any{"amount": 50}) }},
		{"same-value upsert", func() error { return tbl.Upsert(ctx, h, 5, 1, map[string]any{"amount": 50}) }},
		{"stale insert", func() error { return tbl.Insert(ctx, h, 4, 1, map[string]any{"amount": 40}) }},
		{"insert over a row", func() error { return tbl.Insert(ctx, h, 5, 1, map[string]any{"amount": 50}) }},
		{"insert of a new row", func() error { return tbl.Insert(ctx, h, 5, 2, map[string]any{"amount": 20}) }},
	} {
		if err := tc.do(); err == nil {
			t.Errorf("%s: no error", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	if err := tbl.Upsert(ctx, h, 6, 1, map[string]any{"amount": 60}); err != nil {
		t.Fatalf("upsert that updates: %v", err)
	}
	if a, f := row(t, h, name, 1); a != 60 || f != 6 {
		t.Fatalf("row 1: amount %d fence %d, want 60 6", a, f)
	}
}

// TestMySQLFoundRowsOff: in Off mode (plain writes; the table has no
// fence column yet) an Insert over a row must fail as in the other modes,
// with or without clientFoundRows: with it, the INSERT that left the row
// alone counts 1, as a new row does. The row keeps its values.
func TestMySQLFoundRowsOff(t *testing.T) {
	for label, db := range map[string]dbtest.DB{"mysql": dbtest.MySQL(), "mysql_clientFoundRows": dbtest.MySQLFoundRows()} {
		t.Run(label, func(t *testing.T) {
			h := dbtest.Open(t, db)
			name := dbtest.Table(t, h)
			mustExec(t, h, fmt.Sprintf("CREATE TABLE %s (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL)", name))
			mustExec(t, h, fmt.Sprintf("INSERT INTO %s (id, amount) VALUES (1, 10)", name))
			tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}, Mode: fencing.Off})
			if err != nil {
				t.Fatal(err)
			}
			var dbErr *mysql.MySQLError
			if err := tbl.Insert(context.Background(), h, 5, 1, map[string]any{"amount": 20}); err == nil {
				t.Error("insert over a row: no error")
			} else if errors.As(err, &dbErr) {
				t.Errorf("insert over a row: the database refused a statement: %v (there is no fence column to read)", err)
			} else {
				t.Log(err)
			}
			var amount int64
			if err := h.QueryRow(fmt.Sprintf("SELECT amount FROM %s WHERE id = 1", name)).Scan(&amount); err != nil || amount != 10 {
				t.Errorf("row 1: amount %d %v, want 10", amount, err)
			}
		})
	}
}

// TestGuardedWritesInCallersTx: the caller's transaction reads, a newer
// holder (token 6) writes and commits, then the older holder (token 5)
// inserts, upserts or deletes through the caller's transaction. The write
// must be refused, and the caller's commit must not land it, at every
// isolation level users run. CompareAndSet the same way: the version read
// in the transaction is one another writer has moved on from.
func TestGuardedWritesInCallersTx(t *testing.T) {
	type action func(ctx context.Context, tbl *fencing.Table, db fencing.DB) error
	upsert := func(tok fencing.Token, id int) action {
		return func(ctx context.Context, tbl *fencing.Table, db fencing.DB) error {
			return tbl.Upsert(ctx, db, tok, id, map[string]any{"amount": int64(tok) * 100})
		}
	}
	insert := func(tok fencing.Token, id int) action {
		return func(ctx context.Context, tbl *fencing.Table, db fencing.DB) error {
			return tbl.Insert(ctx, db, tok, id, map[string]any{"amount": int64(tok) * 100})
		}
	}
	del := func(tok fencing.Token, id int) action {
		return func(ctx context.Context, tbl *fencing.Table, db fencing.DB) error {
			return tbl.Delete(ctx, db, tok, id)
		}
	}
	cas := func(version int64, amount int) action {
		return func(ctx context.Context, tbl *fencing.Table, db fencing.DB) error {
			return tbl.CompareAndSet(ctx, db, 1, version, map[string]any{"amount": amount})
		}
	}
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		for _, iso := range isolationLevels(db) {
			for _, tc := range []struct {
				name         string
				before       action // before the caller's transaction reads
				newer, stale action
				want         string // row 1 after the caller's commit
			}{
				{"upsert/snapshot-equal", upsert(5, 1), upsert(6, 1), upsert(5, 1), "amount=600 note= fence=6 deleted=0 version=1"},
				{"upsert/snapshot-lower", upsert(3, 1), upsert(6, 1), upsert(5, 1), "amount=600 note= fence=6 deleted=0 version=1"},
				{"upsert/after-newer-delete", upsert(5, 1), del(6, 1), upsert(5, 1), "amount=500 note= fence=6 deleted=1 version=1"},
				{"insert/after-newer-delete", upsert(5, 1), del(6, 1), insert(5, 1), "amount=500 note= fence=6 deleted=1 version=1"},
				{"insert/after-newer-insert", nil, insert(6, 1), insert(5, 1), "amount=600 note= fence=6 deleted=0 version=0"},
				{"upsert/after-newer-insert", nil, insert(6, 1), upsert(5, 1), "amount=600 note= fence=6 deleted=0 version=0"},
				{"delete/snapshot-equal", upsert(5, 1), upsert(6, 1), del(5, 1), "amount=600 note= fence=6 deleted=0 version=1"},
				{"cas/version-moved-on", upsert(5, 1), cas(0, 7), cas(0, 8), "amount=7 note= fence=5 deleted=0 version=1"},
			} {
				t.Run(fmt.Sprintf("%v/%s", iso, tc.name), func(t *testing.T) {
					h, tbl, name := tombTable(t, db, fencing.TableConfig{})
					ctx := context.Background()
					// Another row, so that the caller's read has something to read.
					if err := tbl.Insert(ctx, h, 1, 2, nil); err != nil {
						t.Fatal(err)
					}
					if tc.before != nil {
						if err := tc.before(ctx, tbl, h); err != nil {
							t.Fatal(err)
						}
					}
					tx, err := h.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback()
					var n int64 // the read of a read-modify-write
					if err := tx.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s", name)).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if err := tc.newer(ctx, tbl, h); err != nil {
						t.Fatalf("the newer write: %v", err)
					}
					err = tc.stale(ctx, tbl, tx)
					if !refusedInTx(db, iso, err) && !errors.Is(err, fencing.ErrConflict) {
						t.Errorf("the older write inside the caller's transaction: %v; want it refused", err)
					}
					tx.Commit() // the caller ignores the error and commits anyway
					if got := state(t, h, name, 1); got != tc.want {
						t.Fatalf("after the caller's commit: %s, want %s", got, tc.want)
					}
				})
			}
		}
	})
}

// TestGuardedWriteModes: Insert, Upsert and Delete in off mode (the fence
// neither read nor written) and observe mode (a stale write goes through
// without recording its token, and is reported).
func TestGuardedWriteModes(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		obs := &countingObserver{}
		h, tbl, name := tombTable(t, db, fencing.TableConfig{Mode: fencing.Off, Observer: obs})
		ctx := context.Background()
		set := func(amount int) map[string]any { return map[string]any{"amount": amount} }
		for i, step := range []struct {
			mode            fencing.Mode
			name, want, row string
			do              func() error
		}{
			{fencing.Off, "insert", "ok", "amount=1 note= fence=0 deleted=0 version=0", func() error { return tbl.Insert(ctx, h, 5, 1, set(1)) }},
			{fencing.Off, "insert again", "exists", "amount=1 note= fence=0 deleted=0 version=0", func() error { return tbl.Insert(ctx, h, 5, 1, set(2)) }},
			{fencing.Off, "upsert", "ok", "amount=3 note= fence=0 deleted=0 version=1", func() error { return tbl.Upsert(ctx, h, 5, 1, set(3)) }},
			{fencing.Off, "delete", "ok", "amount=3 note= fence=0 deleted=1 version=2", func() error { return tbl.Delete(ctx, h, 5, 1) }},
			{fencing.Off, "delete of no row", "norow", "amount=3 note= fence=0 deleted=1 version=2", func() error { return tbl.Delete(ctx, h, 5, 2) }},
			{fencing.Off, "insert revives", "ok", "amount=4 note= fence=0 deleted=0 version=3", func() error { return tbl.Insert(ctx, h, 5, 1, set(4)) }},
			{fencing.Observe, "upsert records", "ok", "amount=5 note= fence=10 deleted=0 version=4", func() error { return tbl.Upsert(ctx, h, 10, 1, set(5)) }},
			{fencing.Observe, "stale upsert goes through", "ok", "amount=6 note= fence=10 deleted=0 version=5", func() error { return tbl.Upsert(ctx, h, 9, 1, set(6)) }},
			{fencing.Observe, "stale delete goes through", "ok", "amount=6 note= fence=10 deleted=1 version=6", func() error { return tbl.Delete(ctx, h, 8, 1) }},
			{fencing.Observe, "stale insert revives", "ok", "amount=7 note= fence=10 deleted=0 version=7", func() error { return tbl.Insert(ctx, h, 7, 1, set(7)) }},
			{fencing.Observe, "stale insert over a live row", "exists", "amount=7 note= fence=10 deleted=0 version=7", func() error { return tbl.Insert(ctx, h, 7, 1, set(8)) }},
			{fencing.Enforce, "stale upsert refused", "stale", "amount=7 note= fence=10 deleted=0 version=7", func() error { return tbl.Upsert(ctx, h, 9, 1, set(9)) }},
		} {
			tbl.SetMode(step.mode)
			err := step.do()
			if got := outcome(err); got != step.want {
				t.Fatalf("step %d, %s, %s: %v (%s), want %s", i, step.mode, step.name, err, got, step.want)
			}
			if got := state(t, h, name, 1); got != step.row {
				t.Fatalf("step %d, %s, %s: row %s, want %s", i, step.mode, step.name, got, step.row)
			}
		}
		if got := fmt.Sprint(obs.calls); got != "[observe 9<10 observe 8<10 observe 7<10 observe 7<10 enforce 9<10]" {
			t.Fatalf("observer saw %s", got)
		}
	})
}

// TestUpsertOtherUniqueIndex: a table with a unique index besides its key.
// An Upsert whose values collide with another row's on that index must not
// write that row (MySQL's ON DUPLICATE KEY UPDATE fires on any unique
// index); it fails, and nothing changes.
func TestUpsertOtherUniqueIndex(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, tbl, name := tombTable(t, db, fencing.TableConfig{})
		ctx := context.Background()
		mustExec(t, h, fmt.Sprintf("CREATE UNIQUE INDEX %[1]s_note ON %[1]s (note)", name))
		if err := tbl.Insert(ctx, h, 5, 1, map[string]any{"amount": 1, "note": "taken"}); err != nil {
			t.Fatal(err)
		}
		const row1 = "amount=1 note=taken fence=5 deleted=0 version=0"
		for _, write := range []func() error{
			func() error { return tbl.Upsert(ctx, h, 9, 2, map[string]any{"amount": 2, "note": "taken"}) },
			func() error { return tbl.Insert(ctx, h, 9, 2, map[string]any{"amount": 2, "note": "taken"}) },
		} {
			err := write()
			if err == nil || errors.Is(err, fencing.ErrStale) || errors.Is(err, fencing.ErrExists) {
				t.Errorf("a write of row 2 that collides with row 1's note: %v, want an error of its own", err)
			}
			t.Log(err)
			if got := state(t, h, name, 1); got != row1 {
				t.Fatalf("row 1 changed: %s, want %s", got, row1)
			}
			if got := state(t, h, name, 2); got != "none" {
				t.Fatalf("row 2 appeared: %s", got)
			}
		}
	})
}

// TestUpsertCompositeKey: a two-column key on a schema-qualified table:
// each write reaches its own row only.
func TestUpsertCompositeKey(t *testing.T) {
	schema := map[string]string{"postgres": "public", "mysql": "test", "sqlite": "main"}
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h := dbtest.Open(t, db)
		name := dbtest.Table(t, h)
		ctx := context.Background()
		mustExec(t, h, fmt.Sprintf("CREATE TABLE %s (shop BIGINT NOT NULL, sku VARCHAR(20) NOT NULL, amount BIGINT NOT NULL, PRIMARY KEY (shop, sku))", name))
		tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: schema[db.Name] + "." + name, Key: []string{"shop", "sku"},
			DeletedColumn: "deleted", VersionColumn: "version"})
		if err != nil {
			t.Fatal(err)
		}
		if err := tbl.EnsureColumn(ctx, h); err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			want string
			err  error
		}{
			{"ok", tbl.Upsert(ctx, h, 5, fencing.Key{1, "mug"}, map[string]any{"amount": 1})},
			{"ok", tbl.Upsert(ctx, h, 5, fencing.Key{1, "cup"}, map[string]any{"amount": 2})},
			{"ok", tbl.Insert(ctx, h, 5, fencing.Key{2, "mug"}, map[string]any{"amount": 3})},
			{"exists", tbl.Insert(ctx, h, 5, fencing.Key{1, "mug"}, map[string]any{"amount": 4})},
			{"ok", tbl.Upsert(ctx, h, 7, fencing.Key{1, "mug"}, map[string]any{"amount": 5})},
			{"stale", tbl.Upsert(ctx, h, 6, fencing.Key{1, "mug"}, map[string]any{"amount": 6})},
			{"ok", tbl.Delete(ctx, h, 8, fencing.Key{1, "cup"})},
			{"stale", tbl.Upsert(ctx, h, 6, fencing.Key{1, "cup"}, map[string]any{"amount": 7})},
			{"ok", tbl.CompareAndSet(ctx, h, fencing.Key{2, "mug"}, 0, map[string]any{"amount": 8})},
			{"conflict", tbl.CompareAndSet(ctx, h, fencing.Key{2, "mug"}, 0, map[string]any{"amount": 9})},
		} {
			if got := outcome(step.err); got != step.want {
				t.Fatalf("%v (%s), want %s", step.err, got, step.want)
			}
		}
		rows, err := h.Query(fmt.Sprintf("SELECT shop, sku, amount, fence, deleted, version FROM %s ORDER BY shop, sku", name))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var shop, amount, fence, deleted, version int64
			var sku string
			if err := rows.Scan(&shop, &sku, &amount, &fence, &deleted, &version); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%d/%s: amount=%d fence=%d deleted=%d version=%d", shop, sku, amount, fence, deleted, version))
		}
		want := "[1/cup: amount=2 fence=8 deleted=1 version=1 1/mug: amount=5 fence=7 deleted=0 version=1 2/mug: amount=8 fence=5 deleted=0 version=1]"
		if fmt.Sprint(got) != want {
			t.Fatalf("rows:\n%v\nwant\n%s", got, want)
		}
	})
}

// TestConcurrentCompareAndSet: 8 goroutines each add 1 to a counter 20
// times by read, CompareAndSet, and on ErrConflict read again. No lock:
// the version alone must keep every increment (a lost update would leave
// the counter short).
func TestConcurrentCompareAndSet(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, tbl, name := tombTable(t, db, fencing.TableConfig{})
		ctx := context.Background()
		if err := tbl.Insert(ctx, h, 0, 1, map[string]any{"amount": 0}); err != nil {
			t.Fatal(err)
		}
		const workers, increments = 8, 20
		var wg sync.WaitGroup
		var conflicts atomic.Int64
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < increments; {
					var amount, version int64
					if err := h.QueryRow(fmt.Sprintf("SELECT amount, version FROM %s WHERE id = 1", name)).Scan(&amount, &version); err != nil {
						t.Error(err)
						return
					}
					err := tbl.CompareAndSet(ctx, h, 1, version, map[string]any{"amount": amount + 1})
					switch {
					case err == nil:
						i++
					case errors.Is(err, fencing.ErrConflict):
						conflicts.Add(1)
					default:
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if got, want := state(t, h, name, 1), fmt.Sprintf("amount=%d note= fence=0 deleted=0 version=%d", workers*increments, workers*increments); got != want {
			t.Fatalf("row: %s, want %s", got, want)
		}
		t.Logf("%d increments, %d conflicts retried", workers*increments, conflicts.Load())
	})
}
