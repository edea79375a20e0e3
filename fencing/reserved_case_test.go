package fencing_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// TestReservedColumnsInAnyCase: set may not name the key, fence, deleted
// or version column in any letter case. MySQL and SQLite match column
// names without regard to case, so "FENCE" is the fence column there: a
// CompareAndSet (which carries no token) could raise the fence past every
// real token, and an Update could reset the version under a reader's
// CompareAndSet. Every such call must be refused and leave the row as it was.
func TestReservedColumnsInAnyCase(t *testing.T) {
	type write func(ctx context.Context, tbl *fencing.Table, db fencing.DB, set map[string]any) error
	writes := []struct {
		name string
		do   write
	}{
		{"update", func(ctx context.Context, tbl *fencing.Table, db fencing.DB, set map[string]any) error {
			return tbl.Update(ctx, db, 5, 1, set)
		}},
		{"upsert", func(ctx context.Context, tbl *fencing.Table, db fencing.DB, set map[string]any) error {
			return tbl.Upsert(ctx, db, 5, 1, set)
		}},
		{"cas", func(ctx context.Context, tbl *fencing.Table, db fencing.DB, set map[string]any) error {
			return tbl.CompareAndSet(ctx, db, 1, 0, set)
		}},
	}
	reserved := map[string]any{"id": int64(1), "fence": int64(1) << 40, "deleted": int64(1), "version": int64(0)}
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		for _, w := range writes {
			for _, col := range []string{"id", "fence", "deleted", "version"} {
				for _, name := range []string{strings.ToUpper(col), strings.ToUpper(col[:1]) + col[1:]} {
					t.Run(fmt.Sprintf("%s/%s", w.name, name), func(t *testing.T) {
						h, tbl, table := tombTable(t, db, fencing.TableConfig{})
						ctx := context.Background()
						if err := tbl.Insert(ctx, h, 5, 1, map[string]any{"amount": 500}); err != nil {
							t.Fatal(err)
						}
						const want = "amount=500 note= fence=5 deleted=0 version=0"
						if got := state(t, h, table, 1); got != want {
							t.Fatalf("before: %s, want %s", got, want)
						}
						err := w.do(ctx, tbl, h, map[string]any{"amount": 600, name: reserved[col]})
						if err == nil {
							t.Errorf("%s with set[%q]: nil error, want it refused", w.name, name)
						}
						if got := state(t, h, table, 1); got != want {
							t.Errorf("after %s with set[%q]: %s, want %s (unchanged)", w.name, name, got, want)
						}
					})
				}
			}
		}
	})
}
