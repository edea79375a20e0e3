package fencing_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// BenchmarkTableUpdate: one fenced UPDATE of a row, per database, with a
// plain token, and with a signed one checked by a Verifier — a new grant
// each write (fresh: every write verifies a signature) or one grant's many
// writes (cached). The difference is what signed tokens add to a write.
func BenchmarkTableUpdate(b *testing.B) {
	for _, db := range dbtest.All(b) {
		b.Run(db.Name, func(b *testing.B) {
			ctx := context.Background()
			h := dbtest.Open(b, db)
			name := dbtest.Table(b, h)
			if _, err := h.Exec(fmt.Sprintf("CREATE TABLE %s (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)", name)); err != nil {
				b.Fatal(err)
			}
			if _, err := h.Exec(fmt.Sprintf("INSERT INTO %s (id, amount) VALUES (1, 0)", name)); err != nil {
				b.Fatal(err)
			}
			pub, s := newKey(b)
			plain, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}})
			if err != nil {
				b.Fatal(err)
			}
			var token fencing.Token // grows across the sub-benchmarks: every write is accepted
			b.Run("plain", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					token++
					if err := plain.Update(ctx, h, token, 1, map[string]any{"amount": i}); err != nil {
						b.Fatal(err)
					}
				}
			})
			signedTable := func(b *testing.B) *fencing.Table {
				t, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"},
					Verifier: newVerifier(b, pub), LockName: func([]string) string { return "row/1" }})
				if err != nil {
					b.Fatal(err)
				}
				return t
			}
			b.Run("signed-fresh", func(b *testing.B) {
				tbl := signedTable(b)
				grants := make([]string, b.N)
				for i := range grants {
					grants[i] = sign(b, s, "row/1", token+fencing.Token(i+1))
				}
				token += fencing.Token(b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := tbl.UpdateSigned(ctx, fencing.SQL(h), grants[i], 1, map[string]any{"amount": i}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("signed-cached", func(b *testing.B) {
				tbl := signedTable(b)
				token++
				grant := sign(b, s, "row/1", token)
				for i := 0; i < b.N; i++ {
					if err := tbl.UpdateSigned(ctx, fencing.SQL(h), grant, 1, map[string]any{"amount": i}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
