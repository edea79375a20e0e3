package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// fullAuditTrigger records every insert, update and delete of table's rows
// into table_audit, by the database itself, in the order they happened
// (seq): the row's id, fence, tombstone mark and version before and after,
// and the note written.
func fullAuditTrigger(t *testing.T, h *sql.DB, db dbtest.DB, table string) {
	audit := table + "_audit"
	seq := map[string]string{"postgres": "BIGSERIAL PRIMARY KEY", "mysql": "BIGINT AUTO_INCREMENT PRIMARY KEY", "sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT"}[db.Name]
	mustExec(t, h, fmt.Sprintf(`CREATE TABLE %s (seq %s, op VARCHAR(1), id BIGINT, old_fence BIGINT, new_fence BIGINT,
		old_deleted BIGINT, new_deleted BIGINT, old_version BIGINT, new_version BIGINT, note VARCHAR(100))`, audit, seq))
	cols := "(op, id, old_fence, new_fence, old_deleted, new_deleted, old_version, new_version, note)"
	values := map[string]string{
		"INSERT": "('I', NEW.id, NULL, NEW.fence, NULL, NEW.deleted, NULL, NEW.version, NEW.note)",
		"UPDATE": "('U', NEW.id, OLD.fence, NEW.fence, OLD.deleted, NEW.deleted, OLD.version, NEW.version, NEW.note)",
		"DELETE": "('X', OLD.id, OLD.fence, NULL, OLD.deleted, NULL, OLD.version, NULL, OLD.note)",
	}
	switch db.Name {
	case "postgres":
		mustExec(t, h, fmt.Sprintf(`CREATE FUNCTION %[1]s_fn() RETURNS trigger AS $$ BEGIN
			IF TG_OP = 'INSERT' THEN INSERT INTO %[2]s %[3]s VALUES %[4]s; RETURN NEW; END IF;
			IF TG_OP = 'UPDATE' THEN INSERT INTO %[2]s %[3]s VALUES %[5]s; RETURN NEW; END IF;
			INSERT INTO %[2]s %[3]s VALUES %[6]s; RETURN OLD; END $$ LANGUAGE plpgsql`, table, audit, cols, values["INSERT"], values["UPDATE"], values["DELETE"]))
		t.Cleanup(func() { h.Exec(fmt.Sprintf("DROP FUNCTION IF EXISTS %s_fn() CASCADE", table)) })
		mustExec(t, h, fmt.Sprintf("CREATE TRIGGER %[1]s_tr AFTER INSERT OR UPDATE OR DELETE ON %[1]s FOR EACH ROW EXECUTE FUNCTION %[1]s_fn()", table))
	case "mysql":
		for op, v := range values {
			mustExec(t, h, fmt.Sprintf("CREATE TRIGGER %[1]s_%[2]s AFTER %[2]s ON %[1]s FOR EACH ROW INSERT INTO %[3]s %[4]s VALUES %[5]s", table, op, audit, cols, v))
		}
	case "sqlite":
		for op, v := range values {
			mustExec(t, h, fmt.Sprintf("CREATE TRIGGER %[1]s_%[2]s AFTER %[2]s ON %[1]s BEGIN INSERT INTO %[3]s %[4]s VALUES %[5]s; END", table, op, audit, cols, v))
		}
	}
}

// guardedOp is one Insert, Upsert or Delete of the concurrency test, and
// how it ended.
type guardedOp struct {
	kind  string // insert, upsert, delete
	id    int64
	token fencing.Token
	tag   string // the note an insert or upsert writes: unique
	err   error
}

// TestConcurrentGuardedWrites: 12 goroutines insert, upsert and delete
// three rows with a spread of tokens, out of order. The database's own
// audit log (triggers) must show that no write lowered a row's fence, that
// no refused operation changed anything, that every operation reported
// done did change its row exactly once, and that no row was ever removed
// (Delete leaves a tombstone).
func TestConcurrentGuardedWrites(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		h, tbl, name := tombTable(t, db, fencing.TableConfig{}, "audit")
		fullAuditTrigger(t, h, db, name)
		ctx := context.Background()
		const writers, perWriter, rows = 12, 30, 3
		ops := make([]guardedOp, writers*perWriter)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					o := &ops[w*perWriter+i]
					o.kind = []string{"insert", "upsert", "delete"}[(w+i*5)%3]
					o.id = int64((w*3+i)%rows + 1)
					o.token = fencing.Token(i*2 + (w*5)%7 + 1) // rising, with writers a little apart
					o.tag = fmt.Sprintf("w%d-%d", w, i)
					set := map[string]any{"amount": int64(o.token) * 10, "note": o.tag}
					switch o.kind {
					case "insert":
						o.err = tbl.Insert(ctx, h, o.token, o.id, set)
					case "upsert":
						o.err = tbl.Upsert(ctx, h, o.token, o.id, set)
					case "delete":
						o.err = tbl.Delete(ctx, h, o.token, o.id)
					}
				}
			}()
		}
		wg.Wait()

		// How each operation ended.
		done := map[string]guardedOp{} // tag → insert or upsert reported done
		deletes := map[[2]int64]int{}  // (id, token) → deletes reported done
		count := map[string]int{}
		for _, o := range ops {
			var myErr *mysql.MySQLError
			switch {
			case o.err == nil:
				if o.kind == "delete" {
					deletes[[2]int64{o.id, int64(o.token)}]++
				} else {
					done[o.tag] = o
				}
				count["done"]++
			case errors.Is(o.err, fencing.ErrStale):
				count["stale"]++
			case o.kind == "insert" && errors.Is(o.err, fencing.ErrExists):
				count["exists"]++
			case o.kind == "delete" && errors.Is(o.err, fencing.ErrNoRow):
				count["norow"]++
			case errors.As(o.err, &myErr) && myErr.Number == 1213:
				count["deadlock"]++ // InnoDB rolled the statement back: it must not show in the audit
			default:
				t.Errorf("%s of row %d with token %d: %v", o.kind, o.id, o.token, o.err)
			}
		}

		// What the database recorded.
		rs, err := h.Query(fmt.Sprintf("SELECT op, id, old_fence, new_fence, old_deleted, new_deleted, old_version, new_version, note FROM %s_audit ORDER BY seq", name))
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		fence := map[int64]int64{}    // id → the fence after its last change
		last := map[int64]string{}    // id → the row after its last change
		seen := map[string]bool{}     // tags written
		deleted := map[[2]int64]int{} // (id, fence) → tombstones written
		changes := 0
		for rs.Next() {
			var op, note string
			var id int64
			var oldFence, newFence, oldDel, newDel, oldVer, newVer sql.NullInt64
			if err := rs.Scan(&op, &id, &oldFence, &newFence, &oldDel, &newDel, &oldVer, &newVer, &note); err != nil {
				t.Fatal(err)
			}
			switch {
			case op == "X":
				t.Fatalf("row %d was deleted outright (fence %d): a stale holder could create it again", id, oldFence.Int64)
			case op == "U" && newVer.Int64 == oldVer.Int64:
				// MySQL runs the update trigger for an ON DUPLICATE KEY UPDATE whose IFs left the row alone.
				if newFence != oldFence || newDel != oldDel {
					t.Errorf("row %d changed without a version step: %v→%v deleted %v→%v", id, oldFence, newFence, oldDel, newDel)
				}
				continue
			case op == "U" && newVer.Int64 != oldVer.Int64+1:
				t.Errorf("row %d: version %d → %d", id, oldVer.Int64, newVer.Int64)
			case op == "I" && fence[id] != 0:
				t.Errorf("row %d inserted twice", id)
			}
			changes++
			if newFence.Int64 < fence[id] {
				t.Errorf("the database recorded a write of row %d with token %d over token %d", id, newFence.Int64, fence[id])
			}
			fence[id] = newFence.Int64
			last[id] = fmt.Sprintf("fence=%d deleted=%d version=%d note=%s", newFence.Int64, newDel.Int64, newVer.Int64, note)
			if newDel.Int64 != 0 {
				deleted[[2]int64{id, newFence.Int64}]++
				continue
			}
			o, ok := done[note]
			switch {
			case !ok:
				t.Errorf("the database recorded %q on row %d with token %d, written by an operation that was refused", note, id, newFence.Int64)
			case seen[note]:
				t.Errorf("the database recorded %q twice", note)
			case o.id != id || int64(o.token) != newFence.Int64:
				t.Errorf("the database recorded %q on row %d with token %d; it was the %s of row %d with token %d", note, id, newFence.Int64, o.kind, o.id, o.token)
			}
			seen[note] = true
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		for tag, o := range done {
			if !seen[tag] {
				t.Errorf("the %s of row %d with token %d was reported done, and the database never recorded it", o.kind, o.id, o.token)
			}
		}
		for k, n := range deletes {
			if deleted[k] != n {
				t.Errorf("%d deletes of row %d with token %d reported done, %d tombstones recorded", n, k[0], k[1], deleted[k])
			}
		}
		for k, n := range deleted {
			if deletes[k] != n {
				t.Errorf("%d tombstones of row %d with token %d recorded, %d deletes reported done", n, k[0], k[1], deletes[k])
			}
		}
		for id := range int64(rows) {
			id++
			var f, d, v int64
			var note string
			if err := h.QueryRow(fmt.Sprintf("SELECT fence, deleted, version, note FROM %s WHERE id = %d", name, id)).Scan(&f, &d, &v, &note); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("fence=%d deleted=%d version=%d note=%s", f, d, v, note); got != last[id] {
				t.Errorf("row %d is %s, its last recorded change %s", id, got, last[id])
			}
		}
		if count["stale"] == 0 || count["done"] == 0 || len(deleted) == 0 {
			t.Fatalf("the test did not exercise every outcome: %v, %d tombstones", count, len(deleted))
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range count {
				if !yield(k) {
					return
				}
			}
		})
		t.Logf("%d operations: %v (%v); %d changes recorded", len(ops), count, keys, changes)
	})
}
