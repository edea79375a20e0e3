package fencingotel_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	_ "modernc.org/sqlite"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/fencingotel"
)

// counter is a wrapped Observer: it counts what it is passed on.
type counter struct{ stale, refused, checked int }

func (c *counter) Stale(string, fencing.Mode, fencing.Token, fencing.Token) { c.stale++ }
func (c *counter) Refused(string, fencing.Mode, error)                      { c.refused++ }
func (c *counter) Checked(context.Context, fencing.CheckedWrite)            { c.checked++ }

// table is an SQLite table "totals" (key id) guarded through obs, with a
// Verifier of a fresh key (signed writes) and LockName "totals/<id>".
func table(t *testing.T, obs fencing.Observer) (*sql.DB, *fencing.Table, *fencing.Signer) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE totals (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO totals (id, amount) VALUES (77, 0)`); err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v, err := fencing.NewVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: fencing.SQLite, Name: "totals", Key: []string{"id"}, Observer: obs,
		LockName: func(key []string) string { return "totals/" + key[0] }, Verifier: v})
	if err != nil {
		t.Fatal(err)
	}
	return db, tbl, fencing.NewSigner(priv)
}

// TestAttachesTokenLockAndStaleEvent: a signed write puts its token, lock
// and lease on the writer's span; a stale one then adds a fencing.stale
// event with both tokens; a forged one a fencing.refused event; the
// wrapped Observer hears of each; a context without a recording span gets
// nothing and breaks nothing.
func TestAttachesTokenLockAndStaleEvent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	next := &counter{}
	db, tbl, signer := table(t, fencingotel.New(next))
	sign := func(token fencing.Token) string {
		s, err := signer.Sign(fencing.Grant{Name: "totals/77", Token: token, Lease: 9, IssuedAt: time.UnixMilli(1_780_000_000_000)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write := func(name, signed string) (sdktrace.ReadOnlySpan, error) {
		ctx, span := tracer.Start(context.Background(), name)
		err := tbl.UpdateSigned(ctx, fencing.SQL(db), signed, 77, map[string]any{"amount": 1})
		span.End()
		ended := rec.Ended()
		return ended[len(ended)-1], err
	}

	fresh, err := write("fresh", sign(20))
	if err != nil {
		t.Fatal(err)
	}
	want := []attribute.KeyValue{attribute.Int64("fence.token", 20), attribute.String("fence.lock.name", "totals/77"),
		attribute.Int64("fence.lease", 9), attribute.String("fencing.table", "totals"), attribute.String("fencing.mode", "enforce")}
	for _, w := range want {
		if !slices.Contains(fresh.Attributes(), w) {
			t.Errorf("fresh write's span %v lacks %v", fresh.Attributes(), w)
		}
	}
	if len(fresh.Events()) != 0 {
		t.Errorf("fresh write's span has events %v", fresh.Events())
	}

	stale, err := write("stale", sign(12))
	if !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("stale write: %v, want ErrStale", err)
	}
	if ev := stale.Events(); len(ev) != 1 || ev[0].Name != "fencing.stale" ||
		!slices.Contains(ev[0].Attributes, attribute.Int64("fence.token.offered", 12)) ||
		!slices.Contains(ev[0].Attributes, attribute.Int64("fence.token.highest", 20)) ||
		!slices.Contains(ev[0].Attributes, attribute.Bool("fencing.refused", true)) {
		t.Errorf("stale write's events: %+v, want fencing.stale offered 12 highest 20 refused", ev)
	}

	forged, err := write("forged", sign(30)[:40])
	if !errors.Is(err, fencing.ErrBadSignature) {
		t.Fatalf("forged write: %v, want ErrBadSignature", err)
	}
	if ev := forged.Events(); len(ev) != 1 || ev[0].Name != "fencing.refused" ||
		!slices.Contains(ev[0].Attributes, attribute.String("fencing.reason", "bad_signature")) {
		t.Errorf("forged write's events: %+v, want fencing.refused bad_signature", ev)
	}

	if err := tbl.UpdateSigned(context.Background(), fencing.SQL(db), sign(21), 77, map[string]any{"amount": 2}); err != nil {
		t.Fatalf("write without a span: %v", err)
	}
	if *next != (counter{stale: 1, refused: 1, checked: 4}) {
		t.Errorf("wrapped observer heard %+v, want 1 stale, 1 refused, 4 checked", *next)
	}
}

// TestMiddlewareAttaches: Middleware reports to the same Observer: the
// request's span gets the token and the lock (named like the resource), and
// a stale token's request the fencing.stale event.
func TestMiddlewareAttaches(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	h := fencing.Middleware(fencing.MiddlewareConfig{Store: fencing.NewMemoryStore(), Observer: fencingotel.New(nil),
		Resource: func(r *http.Request) string { return r.URL.Path }}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, token := range []string{"5", "3"} {
		ctx, span := tracer.Start(context.Background(), "request "+token)
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders/9", nil)
		req.Header.Set(fencing.TokenHeader, token)
		h.ServeHTTP(httptest.NewRecorder(), req)
		span.End()
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, want := range []int64{5, 3} {
		for _, w := range []attribute.KeyValue{attribute.Int64("fence.token", want), attribute.String("fence.lock.name", "/orders/9"),
			attribute.String("fencing.table", "http")} {
			if !slices.Contains(spans[i].Attributes(), w) {
				t.Errorf("request %d's span %v lacks %v", i, spans[i].Attributes(), w)
			}
		}
	}
	if ev := spans[1].Events(); len(ev) != 1 || ev[0].Name != "fencing.stale" ||
		!slices.Contains(ev[0].Attributes, attribute.Int64("fence.token.highest", 5)) {
		t.Errorf("stale request's events: %+v, want fencing.stale with highest 5", ev)
	}
	if ev := spans[0].Events(); len(ev) != 0 {
		t.Errorf("fresh request's events: %+v", ev)
	}
}
