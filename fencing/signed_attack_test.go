package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/fencingmetrics"
	"github.com/fencehq/fence/internal/dbtest"
)

// Attacks on signed tokens that a red team found working, kept as tests.

// A signed write matches its row only if the key passed reads exactly as
// the row's stored key: the database's own equality lets "01", " 1", "1.0"
// and "+1" select row 1 of an integer column, so a grant of the
// uncontended lock "totals/01" (tokens grow cluster-wide: it outranks the
// real holder's) would otherwise write row 1 and lock its holder out.
func TestSignedKeyMustReadAsStored(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		ctx := context.Background()
		pub, s := newKey(t)
		h, _, name := setup(t, db)
		tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"},
			Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "totals/" + k[0] },
			Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 5), 1, map[string]any{"amount": 100}); err != nil {
			t.Fatal(err)
		}
		for i, alias := range []string{"01", " 1", "1.0", "+1", "1 "} {
			tok := fencing.Token(10 + i)
			err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/"+alias, tok), alias, map[string]any{"amount": 666})
			// (Postgres refuses "1.0" for a bigint outright.)
			if err == nil || !strings.Contains(err.Error(), "as the database stores it") && !strings.Contains(err.Error(), "invalid input syntax") {
				t.Errorf("key %q with a grant of totals/%s: %v, want a refusal saying the key is not as stored", alias, alias, err)
			}
			if amount, fence := row(t, h, name, 1); amount != 100 || fence != 5 {
				t.Fatalf("key %q wrote row 1: amount %d fence %d", alias, amount, fence)
			}
			err = tbl.InTxSigned(ctx, h, sign(t, s, "totals/"+alias, tok), alias, func(*sql.Tx) error { return errors.New("ran") })
			if err == nil || err.Error() == "ran" {
				t.Errorf("InTxSigned with key %q: %v", alias, err)
			}
		}
		// The key as stored, as an integer or as its text, is the row's.
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 6), "1", map[string]any{"amount": 101}); err != nil {
			t.Fatalf("key \"1\" for row 1: %v", err)
		}
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 7), int64(1), map[string]any{"amount": 102}); err != nil {
			t.Fatalf("key int64(1) for row 1: %v", err)
		}
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 8), 1.0, map[string]any{"amount": 103}); err == nil || !strings.Contains(err.Error(), "integer or string") {
			t.Errorf("a float64 key: %v, want a refusal naming the types", err)
		}
		// A stale signed write with the right key is still just stale.
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 4), 1, map[string]any{"amount": 1}); !errors.Is(err, fencing.ErrStale) {
			t.Errorf("an older grant of totals/1: %v, want ErrStale", err)
		}
	})
}

// On MySQL a VARCHAR compares under a collation that ignores case and
// trailing spaces; the ledger's and the SQL store's keys compare byte for
// byte (VARBINARY), so a holder of lock "orders/1 " or of the lock named
// for "SMS:ORDER-1" cannot claim the action of "sms:order-1", nor a grant
// of "api/Carts/1" raise the fence of "/carts/1". A ledger made by an
// earlier version (VARCHAR) is converted, keeping its claims.
func TestMySQLKeysCompareByteForByte(t *testing.T) {
	db := dbtest.MySQL()
	ctx := context.Background()
	pub, s := newKey(t)
	h := dbtest.Open(t, db)

	name := dbtest.Table(t, h)
	mustExec(t, h, "CREATE TABLE "+name+" (action_key VARCHAR(255) NOT NULL PRIMARY KEY, token BIGINT NOT NULL, state VARCHAR(16) NOT NULL, detail VARCHAR(1000))")
	mustExec(t, h, "INSERT INTO "+name+" (action_key, token, state) VALUES ('sms:order-9', 3, 'done')")
	l, err := fencing.NewLedger(db.Dialect, name)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := l.EnsureTable(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := l.State(ctx, h, "sms:order-9"); err != nil || st != fencing.LedgerDone {
		t.Fatalf("a claim of the old ledger after the conversion: %q, %v", st, err)
	}
	l.Verifier = newVerifier(t, pub)
	l.LockName = func(key string) string { return "orders/" + strings.TrimPrefix(key, "sms:order-") }
	for _, alias := range []string{"sms:order-1 ", "SMS:ORDER-1"} {
		if _, err := l.OnceSigned(ctx, h, alias, sign(t, s, l.LockName(alias), 100), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	sent := false
	ran, err := l.OnceSigned(ctx, h, "sms:order-1", sign(t, s, "orders/1", 50), func(context.Context) error { sent = true; return nil })
	if !sent || !ran || err != nil {
		t.Errorf("after claims of look-alike keys under other locks, the holder of orders/1's action: ran %v, sent %v, %v", ran, sent, err)
	}

	store, err := fencing.NewSQLStore(db.Dialect, h, dbtest.Table(t, h))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	mw := fencing.Middleware(fencing.MiddlewareConfig{Store: store, Resource: func(r *http.Request) string { return r.URL.Path },
		Verifier: newVerifier(t, pub), LockName: func(r *http.Request) string { return "api" + r.URL.Path }},
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func(path, tok string) int {
		r := httptest.NewRequest(http.MethodPut, path, nil)
		r.Header.Set(fencing.TokenHeader, tok)
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		path, lock string
		token      fencing.Token
	}{{"/carts/1", "api/carts/1", 10}, {"/Carts/1", "api/Carts/1", 99}, {"/carts/1%20", "api/carts/1 ", 98}, {"/carts/1", "api/carts/1", 10}} {
		if code := do(c.path, sign(t, s, c.lock, c.token)); code != http.StatusOK {
			t.Errorf("PUT %q under %s: %d (another lock's grant raised its fence?)", c.path, c.lock, code)
		}
	}
}

// Only the signing of a grant is accepted: not its text with other
// trailing bits, nor with line breaks, which the decoder would skip (and
// each of which would cost a signature check and a cache slot).
func TestSignedTokenHasOneText(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	pub, s := newKey(t)
	v := newVerifier(t, pub)
	signed := sign(t, s, "totals/77", 5)
	var alts []string
	last := strings.IndexByte(alphabet, signed[len(signed)-1])
	for d := 1; d < 4; d++ {
		alts = append(alts, signed[:len(signed)-1]+string(alphabet[last^d]))
	}
	for i := 1; i < len(signed); i += 7 {
		alts = append(alts, signed[:i]+"\n"+signed[i:], signed[:i]+"\r\n"+signed[i:])
	}
	for _, alt := range alts {
		if _, err := v.VerifyFor(alt, "totals/77", "t"); !errors.Is(err, fencing.ErrBadSignature) {
			t.Errorf("%q accepted (%v)", alt, err)
		}
	}
	if _, err := v.VerifyFor(signed, "totals/77", "t"); err != nil {
		t.Fatal(err)
	}
}

// Observe mode counts the writes it lets through that enforce mode would
// refuse for their signature or limit, as it counts stale ones; so does the
// Middleware's 403.
func TestRefusalsAreCounted(t *testing.T) {
	db := dbtest.SQLite(t)
	ctx := context.Background()
	pub, s := newKey(t)
	h, _, name := setup(t, db)
	reg := prometheus.NewRegistry()
	obs := fencingmetrics.New(reg)
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}, Mode: fencing.Observe,
		Observer: obs, Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "totals/" + k[0] },
		Limit: fencing.Limit{Max: 1000}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []func() error{
		func() error { return tbl.Update(ctx, h, 5, 1, map[string]any{"amount": 1}) }, // plain
		func() error {
			return tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/2", 6), 1, map[string]any{"amount": 2})
		}, // another lock's
		func() error {
			return tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 5000), 1, map[string]any{"amount": 3})
		},
	} {
		if err := w(); err != nil {
			t.Fatal(err)
		}
	}
	mw := fencing.Middleware(fencing.MiddlewareConfig{Store: fencing.NewMemoryStore(), Resource: func(r *http.Request) string { return r.URL.Path },
		Verifier: newVerifier(t, pub), Observer: obs}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest(http.MethodPut, "/x", nil)
	r.Header.Set(fencing.TokenHeader, "7")
	mw.ServeHTTP(httptest.NewRecorder(), r)
	for labels, want := range map[[3]string]float64{
		{name, "observe", "bad_signature"}: 2, {name, "observe", "too_high"}: 1, {"http", "enforce", "bad_signature"}: 1,
	} {
		got := testutil.ToFloat64(obsCounter(t, reg, labels))
		if got != want {
			t.Errorf("fencing_refused_writes_total%v = %v, want %v", labels, got, want)
		}
	}
}

// obsCounter is fencing_refused_writes_total{table, mode, reason} in reg.
func obsCounter(t *testing.T, reg *prometheus.Registry, l [3]string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fencing_refused_writes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if got["table"] == l[0] && got["mode"] == l[1] && got["reason"] == l[2] {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return 0 })
}
