package fencing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

func TestLimitCheck(t *testing.T) {
	for _, tc := range []struct {
		name           string
		limit          fencing.Limit
		highest, token fencing.Token
		ceiling        fencing.Token // 0: accepted
	}{
		{"zero limit accepts anything", fencing.Limit{}, 7, 1 << 63, 0},
		{"zero limit, max token", fencing.Limit{}, 0, ^fencing.Token(0), 0},
		{"at max", fencing.Limit{Max: 1000}, 0, 1000, 0},
		{"above max", fencing.Limit{Max: 1000}, 0, 1001, 1000},
		{"above max, far", fencing.Limit{Max: 1000}, 999, 1 << 62, 1000},
		{"jump, fresh resource is bounded by max only", fencing.Limit{Max: 1000, MaxJump: 10}, 0, 1000, 0},
		{"jump, fresh resource without max", fencing.Limit{MaxJump: 10}, 0, 1 << 62, 0},
		{"at jump", fencing.Limit{MaxJump: 10}, 50, 60, 0},
		{"above jump", fencing.Limit{MaxJump: 10}, 50, 61, 60},
		{"below highest is not the limit's business", fencing.Limit{Max: 100, MaxJump: 10}, 50, 3, 0},
		{"jump below max", fencing.Limit{Max: 1000, MaxJump: 10}, 50, 61, 60},
		{"max below jump", fencing.Limit{Max: 55, MaxJump: 10}, 50, 56, 55},
		{"jump would overflow", fencing.Limit{MaxJump: 10}, ^fencing.Token(0) - 3, ^fencing.Token(0), 0},
		{"highest above max (poisoned before the limit)", fencing.Limit{Max: 100, MaxJump: 10}, 500, 101, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limit.Check("r", tc.highest, tc.token)
			if tc.ceiling == 0 {
				if err != nil {
					t.Fatalf("Check(highest %d, token %d): %v; want accepted", tc.highest, tc.token, err)
				}
				return
			}
			var th *fencing.TooHighError
			if !errors.Is(err, fencing.ErrTooHigh) || !errors.As(err, &th) || th.Offered != tc.token || th.Ceiling != tc.ceiling || th.Resource != "r" {
				t.Fatalf("Check(highest %d, token %d): %v; want TooHighError with ceiling %d", tc.highest, tc.token, err, tc.ceiling)
			}
			if errors.Is(err, fencing.ErrStale) {
				t.Fatal("a token above the limit matches ErrStale")
			}
		})
	}
}

func TestTooHighErrorMessage(t *testing.T) {
	err := error(&fencing.TooHighError{Resource: "totals/77", Offered: 1 << 62, Ceiling: 1000})
	if got := err.Error(); got != "fencing: token for totals/77 above the limit: 4611686018427387904 > 1000 (no lock grant issued it; refused so it cannot lock out every real holder)" {
		t.Fatalf("message: %s", got)
	}
}

// TestPoisonedRow: a token no grant issued must not lock a row out.
func TestPoisonedRow(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		ctx := context.Background()
		h, _, name := setup(t, db)
		newTable := func(mode fencing.Mode, limit fencing.Limit) *fencing.Table {
			tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}, Mode: mode, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			return tbl
		}
		limited := newTable(fencing.Enforce, fencing.Limit{Max: 10000, MaxJump: 100})
		write := func(tbl *fencing.Table, tok fencing.Token, amount int) error {
			return tbl.Update(ctx, h, tok, 1, map[string]any{"amount": amount})
		}
		tooHigh := func(err error, ceiling fencing.Token) bool {
			var th *fencing.TooHighError
			return errors.As(err, &th) && th.Ceiling == ceiling && errors.Is(err, fencing.ErrTooHigh) && !errors.Is(err, fencing.ErrStale)
		}
		for _, step := range []struct {
			name    string
			tbl     *fencing.Table
			token   fencing.Token
			amount  int   // written
			want    error // nil, ErrStale or ErrTooHigh
			ceiling fencing.Token
			row     [2]int64 // amount and fence after the step
		}{
			{"poison above max on a fresh row", limited, 1 << 62, 1, fencing.ErrTooHigh, 10000, [2]int64{0, 0}},
			{"fresh row: max alone bounds the first token", limited, 5000, 2, nil, 0, [2]int64{2, 5000}},
			{"above max", limited, 10001, 3, fencing.ErrTooHigh, 10000, [2]int64{2, 5000}},
			{"above the jump", limited, 5101, 4, fencing.ErrTooHigh, 5100, [2]int64{2, 5000}},
			{"at the jump", limited, 5100, 5, nil, 0, [2]int64{5, 5100}},
			{"stale is still stale", limited, 5099, 6, fencing.ErrStale, 0, [2]int64{5, 5100}},
			{"observe lets it through but never records it", newTable(fencing.Observe, fencing.Limit{Max: 10000}), 1 << 62, 7, nil, 0, [2]int64{7, 5100}},
			{"no limit: the column's own ceiling", newTable(fencing.Enforce, fencing.Limit{}), 1 << 63, 8, fencing.ErrTooHigh, 1<<63 - 1, [2]int64{7, 5100}},
			{"a real holder still gets in", limited, 5101, 9, nil, 0, [2]int64{9, 5101}},
		} {
			err := write(step.tbl, step.token, step.amount)
			switch {
			case step.want == nil && err != nil:
				t.Fatalf("%s: token %d refused: %v", step.name, step.token, err)
			case step.want == fencing.ErrStale && (!errors.Is(err, fencing.ErrStale) || errors.Is(err, fencing.ErrTooHigh)):
				t.Fatalf("%s: token %d: %v; want ErrStale", step.name, step.token, err)
			case step.want == fencing.ErrTooHigh && !tooHigh(err, step.ceiling):
				t.Fatalf("%s: token %d: %v; want TooHighError with ceiling %d", step.name, step.token, err, step.ceiling)
			}
			if a, f := row(t, h, name, 1); a != step.row[0] || f != step.row[1] {
				t.Fatalf("%s: row amount %d fence %d; want %v", step.name, a, f, step.row)
			}
		}
	})
}

// TestPoisonedResource: the middleware with a limit refuses a never-issued
// token (400), so the resource keeps serving real holders.
func TestPoisonedResource(t *testing.T) {
	for name, store := range tokenStores(t) {
		t.Run(name, func(t *testing.T) {
			h := fencing.Middleware(fencing.MiddlewareConfig{Store: store(t), Resource: func(r *http.Request) string { return r.URL.Path },
				Limit: fencing.Limit{Max: 1 << 40, MaxJump: 100}},
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for _, tt := range []struct {
				token fencing.Token
				code  int
			}{
				{1 << 62, 400}, // never issued: refused, not recorded
				{35, 200},
				{1<<40 + 1, 400},
				{136, 400}, // more than 100 above 35
				{135, 200},
				{134, 409},
			} {
				r := httptest.NewRequest("PUT", "/totals/77", nil)
				r.Header.Set(fencing.TokenHeader, strconv.FormatUint(tt.token, 10))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != tt.code {
					t.Fatalf("PUT with token %d: %d %s; want %d", tt.token, w.Code, w.Body, tt.code)
				}
			}
		})
	}
}

func TestMemoryStoreLimit(t *testing.T) {
	s := fencing.NewMemoryStore()
	ctx := context.Background()
	limit := fencing.Limit{Max: 1000}
	if _, ok, err := s.Advance(ctx, "r", 1<<62, limit); ok || !errors.Is(err, fencing.ErrTooHigh) {
		t.Fatalf("token 1<<62: ok=%v %v", ok, err)
	}
	if h, ok, err := s.Advance(ctx, "r", 7, limit); !ok || err != nil || h != 7 {
		t.Fatalf("token 7 after the refused one: %d %v %v", h, ok, err)
	}
	if h, ok, err := s.Advance(ctx, "r", 6, limit); ok || err != nil || h != 7 {
		t.Fatalf("token 6: %d %v %v", h, ok, err)
	}
}
