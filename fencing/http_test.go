package fencing_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/fencingmetrics"
	"github.com/fencehq/fence/internal/dbtest"
)

// tokenStores returns a constructor for each TokenStore: memory, and SQL on
// each database and on MySQL with clientFoundRows.
func tokenStores(t *testing.T) map[string]func(t *testing.T) fencing.TokenStore {
	stores := map[string]func(t *testing.T) fencing.TokenStore{
		"memory": func(*testing.T) fencing.TokenStore { return fencing.NewMemoryStore() },
	}
	for _, db := range append(dbtest.All(t), dbtest.MySQLFoundRows()) {
		name := "sql-" + db.Name
		if strings.Contains(db.DSN, "clientFoundRows") {
			name += "_clientFoundRows"
		}
		stores[name] = func(t *testing.T) fencing.TokenStore {
			h := dbtest.Open(t, db)
			s, err := fencing.NewSQLStore(db.Dialect, h, dbtest.Table(t, h))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.EnsureTable(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	return stores
}

func TestMiddleware(t *testing.T) {
	for name, newStore := range tokenStores(t) {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			var mu sync.Mutex
			var written []string
			h := fencing.Middleware(fencing.MiddlewareConfig{Store: newStore(t), Resource: func(r *http.Request) string { return r.URL.Path },
				Observer: fencingmetrics.New(reg)},
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					written = append(written, r.Header.Get(fencing.TokenHeader))
					mu.Unlock()
				}))
			do := func(method, path, token string) *httptest.ResponseRecorder {
				r := httptest.NewRequest(method, path, nil)
				if token != "" {
					r.Header.Set(fencing.TokenHeader, token)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			for _, tt := range []struct {
				method, path, token string
				code                int
			}{
				{"PUT", "/totals/77", "34", 200},
				{"PUT", "/totals/77", "34", 200}, // the holder writes again
				{"PUT", "/totals/77", "33", 409}, // the paused holder
				{"PUT", "/totals/78", "33", 200}, // another resource
				{"PUT", "/totals/77", "", 428},
				{"PUT", "/totals/77", "abc", 400},
				{"GET", "/totals/77", "", 200},
				{"PUT", "/totals/77", "35", 200},
			} {
				w := do(tt.method, tt.path, tt.token)
				if w.Code != tt.code {
					t.Fatalf("%s %s with token %q: %d %s, want %d", tt.method, tt.path, tt.token, w.Code, w.Body, tt.code)
				}
				if w.Code == 409 {
					var body struct{ Offered, Highest uint64 }
					json.Unmarshal(w.Body.Bytes(), &body)
					if body.Offered != 33 || body.Highest != 34 || w.Header().Get(fencing.TokenHighestHeader) != "34" {
						t.Fatalf("409 body %s", w.Body)
					}
				}
			}
			if strings.Join(written, ",") != "34,34,33,,35" {
				t.Fatalf("handler ran for tokens %q", written)
			}
			want := `
# HELP fencing_stale_writes_total Writes with a stale fencing token: refused (mode=enforce) or let through by observe mode (mode=observe).
# TYPE fencing_stale_writes_total counter
fencing_stale_writes_total{mode="enforce",table="http"} 1
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestModeHandler(t *testing.T) {
	tbl, _ := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: "totals", Key: []string{"id"}, Mode: fencing.Observe})
	h := fencing.ModeHandler(tbl)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if strings.TrimSpace(w.Body.String()) != `{"totals":"observe"}` {
		t.Fatalf("GET: %s", w.Body)
	}
	post := func(form url.Values) int {
		r := httptest.NewRequest("POST", "/", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if c := post(url.Values{"table": {"totals"}, "mode": {"enforce"}}); c != 200 || tbl.Mode() != fencing.Enforce {
		t.Fatalf("switch: %d %v", c, tbl.Mode())
	}
	if c := post(url.Values{"table": {"totals"}, "mode": {"on"}}); c != 400 || tbl.Mode() != fencing.Enforce {
		t.Fatalf("bad mode: %d %v", c, tbl.Mode())
	}
	if c := post(url.Values{"table": {"nope"}, "mode": {"off"}}); c != 404 {
		t.Fatalf("unknown table: %d", c)
	}
}

// lateInsertDB lets another instance insert the resource's row (fence 9)
// just before the store's own first insert: the store loses that race.
type lateInsertDB struct {
	*sql.DB
	table string
	done  bool
}

func (d *lateInsertDB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if strings.HasPrefix(q, "INSERT") && !d.done {
		d.done = true
		if _, err := d.DB.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (resource_key, fence) VALUES ('%s', 9)", d.table, args[0])); err != nil {
			return nil, err
		}
	}
	return d.DB.ExecContext(ctx, q, args...)
}

// TestSQLStoreInsertRace: a store that loses the race to create a resource's
// row compares its token with the winner's instead of accepting it, on
// MySQL also when the DSN sets clientFoundRows (the losing INSERT … ON
// DUPLICATE KEY UPDATE then counts the row it found, as a new one).
func TestSQLStoreInsertRace(t *testing.T) {
	forEachDBAndFoundRows(t, func(t *testing.T, db dbtest.DB) {
		h := dbtest.Open(t, db)
		name := dbtest.Table(t, h)
		late := &lateInsertDB{DB: h, table: name}
		s, err := fencing.NewSQLStore(db.Dialect, late, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.EnsureTable(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if highest, ok, err := s.Advance(ctx, "/totals/77", 5, fencing.Limit{}); ok || err != nil || highest != 9 {
			t.Fatalf("token 5 after another instance created the resource with 9: highest %d ok %v %v", highest, ok, err)
		}
		if highest, ok, err := s.Advance(ctx, "/totals/77", 12, fencing.Limit{}); !ok || err != nil || highest != 12 {
			t.Fatalf("token 12: highest %d ok %v %v", highest, ok, err)
		}
	})
}
