package fencing_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
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

// Red team, round 4: attacks on the exact-key check of signed writes.

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Found by a red team (fixed): the exact-key refusal (checkExact) bypasses Table.refuse: in
// Observe mode a signed write whose key is not the row's stored text
// ("01" for row 1) fails with ErrBadSignature instead of going through,
// although Observe promises "every write goes through" and lets through
// every other signature refusal (a grant of another lock, a plain token).
// Impact: switching a table to Observe (the documented first step of a
// rollout) can break production writes that Enforce would merely have
// counted; the rollout mode is no longer safe. Fix: in update, route the
// SignatureError of checkExact through t.refuse (count it, and in Observe
// do the plain write).
func TestObserveModeLetsLooseKeyThrough(t *testing.T) {
	db := dbtest.SQLite(t)
	ctx := context.Background()
	pub, s := newKey(t)
	h, _, name := setup(t, db)
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}, Mode: fencing.Observe,
		Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "totals/" + k[0] }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Another lock's grant: observe mode lets it through (as designed).
	if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/2", 6), 1, map[string]any{"amount": 2}); err != nil {
		t.Fatalf("observe mode, a grant of another lock: %v (want it let through)", err)
	}
	// A key that reads otherwise than stored: observe mode should let it
	// through too; it fails the write instead.
	if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/01", 7), "01", map[string]any{"amount": 3}); err != nil {
		t.Errorf("observe mode, key \"01\" for row 1: %v (observe mode must let every write through)", err)
	}
	if amount, _ := row(t, h, name, 1); amount != 3 {
		t.Errorf("observe mode did not write row 1 (amount %d, want 3)", amount)
	}
}

// Found by a red team (fixed): the exact-key refusal is not reported to the RefusalObserver, so
// fencing_refused_writes_total{reason="bad_signature"} misses it (the
// commit says every refusal of a signed token reaches the observer).
// Impact: the attack the exact check exists for (a grant of "totals/01"
// aimed at row 1) is refused silently: operators watching the metric never
// see it. Fix: call observeRefusal (via t.refuse) for checkExact's error.
func TestLooseKeyRefusalIsCounted(t *testing.T) {
	db := dbtest.SQLite(t)
	ctx := context.Background()
	pub, s := newKey(t)
	h, _, name := setup(t, db)
	reg := prometheus.NewRegistry()
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"},
		Observer: fencingmetrics.New(reg), Verifier: newVerifier(t, pub),
		LockName: func(k []string) string { return "totals/" + k[0] }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	err = tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/01", 7), "01", map[string]any{"amount": 3})
	if !errors.Is(err, fencing.ErrBadSignature) {
		t.Fatalf("key \"01\" for row 1: %v, want ErrBadSignature", err)
	}
	if got := testutil.ToFloat64(obsCounter(t, reg, [3]string{name, "enforce", "bad_signature"})); got != 1 {
		t.Errorf("fencing_refused_writes_total{reason=bad_signature} = %v after a refused look-alike key, want 1", got)
	}
}

// Found by a red team (fixed): MySQL's exactText is CAST(k AS BINARY): the bytes of the stored
// key in the COLUMN's character set, compared with the bytes of the
// argument in the CONNECTION's (utf8mb4). For a latin1 column (MySQL's
// default before 8.0, common in older schemas) every non-ASCII key differs
// ("café" is E9 there, C3 A9 in the argument); for a utf16/ucs2 column
// every key does. Impact: the real holder of "totals/café" can never write
// its row: every signed write is refused as a bad signature (an outage
// for those rows, and a false alarm in the metrics). Fix: compare in one
// character set, e.g. CAST(CONVERT(k USING utf8mb4) AS BINARY) = ?, which
// keeps integers' text and is byte-exact.
func TestMySQLNonUTF8KeyColumn(t *testing.T) {
	db := dbtest.MySQL()
	ctx := context.Background()
	pub, s := newKey(t)
	h := dbtest.Open(t, db)
	for _, c := range []struct{ charset, key string }{{"latin1", "café"}, {"utf16", "plain"}} {
		name := dbtest.Table(t, h)
		mustExec(t, h, "CREATE TABLE "+name+" (id VARCHAR(64) CHARACTER SET "+c.charset+" NOT NULL PRIMARY KEY, amount BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)")
		mustExec(t, h, "INSERT INTO "+name+" (id, amount) VALUES (?, 0)", c.key)
		tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"},
			Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "totals/" + k[0] }, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/"+c.key, 5), c.key, map[string]any{"amount": 1}); err != nil {
			t.Errorf("%s column: the holder of totals/%s writing its own row %q: %v", c.charset, c.key, c.key, err)
		}
	}
}

// Found by a red team (fixed): Postgres's exactText, CAST(k AS TEXT), depends on the session
// for every key type but integers and text: DATE and TIMESTAMP(TZ) follow
// DateStyle/TimeZone, so one row reads as "2024-01-02" in one session and
// "02.01.2024" in another (SET DateStyle = German), and both pass the exact
// check of their own session. Key values of string type are what the docs
// ask for, so nothing refuses a DATE key. Impact: two locks own one row: a
// writer holding the uncontended lock "totals/02.01.2024" (a later grant,
// so a higher token) writes the row of "totals/2024-01-02" and locks its
// real holder out with ErrStale — the cross-lock write signed tokens exist
// to stop; two honest services with different session settings also get
// no mutual exclusion. MySQL's TIMESTAMP and time_zone do the same. Fix:
// accept signed writes only on key columns of integer or character types
// (look the types up once, e.g. from information_schema), or pin the text
// form in SQL (to_char with a fixed format, AT TIME ZONE 'UTC').
func TestSignedDateKeyRefused(t *testing.T) {
	db := dbtest.Postgres()
	ctx := context.Background()
	pub, s := newKey(t)
	h := dbtest.Open(t, db)
	name := dbtest.Table(t, h)
	mustExec(t, h, "CREATE TABLE "+name+" (day DATE PRIMARY KEY, amount BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, h, "INSERT INTO "+name+" (day, amount) VALUES ('2024-01-02', 0)")
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"day"},
		Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "totals/" + k[0] }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Signed writes to a DATE-keyed table are refused, saying why.
	err = tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/2024-01-02", 5), "2024-01-02", map[string]any{"amount": 100})
	if err == nil || !strings.Contains(err.Error(), "integer or character types") {
		t.Fatalf("a signed write to a DATE-keyed table: %v, want a refusal naming the key types", err)
	}
	// A writer with its own session settings and a grant of another lock.
	conn, err := h.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET DateStyle = 'German, DMY'"); err != nil {
		t.Fatal(err)
	}
	err = tbl.UpdateSigned(ctx, fencing.SQL(conn), sign(t, s, "totals/02.01.2024", 50), "02.01.2024", map[string]any{"amount": 666})
	if err == nil {
		t.Errorf("a grant of lock totals/02.01.2024 wrote the row of totals/2024-01-02 (same DATE, another session's text)")
	}
	var amount, fence int64
	if err := h.QueryRowContext(ctx, "SELECT amount, fence FROM "+name).Scan(&amount, &fence); err != nil {
		t.Fatal(err)
	}
	if amount != 0 || fence != 0 {
		t.Errorf("row of totals/2024-01-02: amount %d, fence %d after the refused writes (want 0, 0)", amount, fence)
	}
}

// Found by a red team (fixed): the SQL store's resource_key became VARBINARY(255) on MySQL: 255
// BYTES, where the VARCHAR(255) it replaces held 255 characters (up to
// 1020 bytes in utf8mb4). EnsureTable's conversion of an existing store
// that holds a longer non-ASCII key fails under strict mode (MariaDB's and
// MySQL's default), so a service that upgrades no longer starts; and a new
// store refuses such resources (the Middleware answers 503 for ever).
// Impact: upgrade outage / resources that cannot be written. Fix: size the
// column in bytes as the old one was (VARBINARY(1020)), or check key length
// and refuse with a clear error before the conversion.
func TestMySQLStoreConversionLongKey(t *testing.T) {
	db := dbtest.MySQL()
	ctx := context.Background()
	h := dbtest.Open(t, db)
	name := dbtest.Table(t, h)
	long := "/files/" + strings.Repeat("é", 200) // 207 characters, 407 bytes
	mustExec(t, h, "CREATE TABLE "+name+" (resource_key VARCHAR(255) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, h, "INSERT INTO "+name+" (resource_key, fence) VALUES (?, 3)", long)
	store, err := fencing.NewSQLStore(db.Dialect, h, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureTable(ctx); err != nil {
		t.Errorf("EnsureTable of a store made by the earlier version: %v", err)
	}
	fresh, err := fencing.NewSQLStore(db.Dialect, h, dbtest.Table(t, h))
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := fresh.Advance(ctx, long, 5, fencing.Limit{}); err != nil || !ok {
		t.Errorf("Advance of a 207-character resource key (which VARCHAR(255) held): ok %v, %v", ok, err)
	}
}

// Found by a red team (fixed): binaryKey looks the column up in DATABASE() by the table's
// unqualified name, so a store (or ledger) named "otherdb.table" — a MySQL
// schema-qualified name, which NewSQLStore accepts — is never converted:
// its VARCHAR keeps folding case and trailing spaces, and a grant of
// "api/Carts/1" raises the fence of "/carts/1". Impact: the fix silently
// does not apply to qualified tables. Fix: split the qualified name and
// query table_schema = <schema> (DATABASE() only when unqualified), as
// addColumn's columnQuery should too.
func TestMySQLQualifiedStoreConverted(t *testing.T) {
	db := dbtest.MySQL()
	ctx := context.Background()
	pub, s := newKey(t)
	h := dbtest.Open(t, db)
	schema := "fence_rt4_" + strings.TrimPrefix(dbtest.Table(t, h), "fence_test_")
	mustExec(t, h, "CREATE DATABASE "+schema)
	t.Cleanup(func() { h.Exec("DROP DATABASE IF EXISTS " + schema) })
	qualified := schema + ".store"
	mustExec(t, h, "CREATE TABLE "+qualified+" (resource_key VARCHAR(255) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0)")
	store, err := fencing.NewSQLStore(db.Dialect, h, qualified)
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
	do("/carts/1", sign(t, s, "api/carts/1", 10))
	do("/Carts/1", sign(t, s, "api/Carts/1", 99)) // another lock's grant
	if code := do("/carts/1", sign(t, s, "api/carts/1", 11)); code != http.StatusOK {
		t.Errorf("the holder of api/carts/1 after a grant of api/Carts/1 wrote /Carts/1: %d (its fence was raised: the qualified store still folds case)", code)
	}
}
