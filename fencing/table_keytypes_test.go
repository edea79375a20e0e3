package fencing_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// Found by a review (fixed): checkKeyTypes is cached per Table (keyTypesOK), but the Runner
// — and so the database, schema and session the catalog question is about
// — is passed per call, and the question itself is asked of the
// connection's own schema (current_schema() / DATABASE()). One Table used
// for several tenants (schema per tenant via search_path, or one *sql.DB
// per tenant database — the API invites it: UpdateSigned(ctx, r, ...)) is
// checked against the first tenant only. A tenant whose key column is a
// DATE then gets signed writes with no type check, and the DateStyle
// cross-lock write TestSignedDateKeyRefused was written for is back: a
// holder of "totals/02.01.2024" (German DateStyle session) writes the row
// of "totals/2024-01-02" and raises its fence.
// Fix: cache per (database, schema, table) as the session resolves it —
// or make the check part of the statement (e.g. refuse in SQL unless
// pg_typeof(k) is one of the fixed-text types), or look the type up with
// the same connection on every signed write (cheap: one catalog row), or
// document that a Table is bound to one database and schema and check
// that (current_database(), current_schema()) matches the cached one.
func TestKeyTypesGuardedInEverySchema(t *testing.T) {
	db := dbtest.Postgres()
	ctx := context.Background()
	pub, s := newKey(t)
	h := dbtest.Open(t, db)
	base := strings.TrimPrefix(dbtest.Table(t, h), "fence_test_")
	intSchema, dateSchema := "fence_r5i_"+base, "fence_r5d_"+base
	for _, sc := range []string{intSchema, dateSchema} {
		mustExec(t, h, "CREATE SCHEMA "+sc)
		t.Cleanup(func() { h.Exec("DROP SCHEMA IF EXISTS " + sc + " CASCADE") })
	}
	mustExec(t, h, "CREATE TABLE "+intSchema+".totals (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, h, "INSERT INTO "+intSchema+".totals (id, amount) VALUES (1, 0)")
	mustExec(t, h, "CREATE TABLE "+dateSchema+".totals (id DATE PRIMARY KEY, amount BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, h, "INSERT INTO "+dateSchema+".totals (id, amount) VALUES ('2024-01-02', 0)")

	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: "totals", Key: []string{"id"},
		Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "totals/" + k[0] }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	session := func(settings ...string) *sql.Conn {
		conn, err := h.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		for _, q := range settings {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		return conn
	}
	tenantA := session("SET search_path = " + intSchema)
	if err := tbl.UpdateSigned(ctx, fencing.SQL(tenantA), sign(t, s, "totals/1", 5), 1, map[string]any{"amount": 1}); err != nil {
		t.Fatalf("tenant A (integer key), the holder of totals/1: %v", err)
	}
	// Tenant B: same Table, a DATE key, a session with another DateStyle,
	// and a grant of another lock.
	tenantB := session("SET search_path = "+dateSchema, "SET DateStyle = 'German, DMY'")
	err = tbl.UpdateSigned(ctx, fencing.SQL(tenantB), sign(t, s, "totals/02.01.2024", 50), "02.01.2024", map[string]any{"amount": 666})
	var amount, fence int64
	if qerr := h.QueryRowContext(ctx, "SELECT amount, fence FROM "+dateSchema+".totals").Scan(&amount, &fence); qerr != nil {
		t.Fatal(qerr)
	}
	if err == nil || amount != 0 || fence != 0 {
		t.Errorf("tenant B (DATE key): a grant of totals/02.01.2024 wrote the row of totals/2024-01-02 (err %v; row amount %d, fence %d): the key-type check was cached from tenant A's table", err, amount, fence)
	}
}

// Found by a review (fixed): checkKeyTypes' refusal bypasses Table.refuse, so Observe mode
// fails the write instead of letting it through (and the RefusalObserver
// never hears of it) — the same defect the red team reported for the
// exact-key check (TestObserveModeLetsLooseKeyThrough), which d4b9f48
// fixed for checkExact but reintroduced for the new check. A team that
// turns on a Verifier in Observe mode (the documented first rollout step)
// on a table keyed by a DATE/UUID/NUMERIC column breaks every write of
// that table in production instead of seeing the would-be refusals.
// Fix: send the key-type error through t.refuse (as a SignatureError or a
// dedicated refusal reason), or refuse at NewTable/EnsureColumn time where
// a configuration error belongs, not per write.
func TestObserveModeLetsKeyTypeRefusalThrough(t *testing.T) {
	db := dbtest.Postgres()
	ctx := context.Background()
	pub, s := newKey(t)
	h := dbtest.Open(t, db)
	name := dbtest.Table(t, h)
	mustExec(t, h, "CREATE TABLE "+name+" (day DATE PRIMARY KEY, amount BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, h, "INSERT INTO "+name+" (day, amount) VALUES ('2024-01-02', 0)")
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"day"}, Mode: fencing.Observe,
		Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "totals/" + k[0] }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/2024-01-02", 5), "2024-01-02", map[string]any{"amount": 100}); err != nil {
		t.Errorf("observe mode, a signed write to a DATE-keyed table: %v (observe mode must let every write through)", err)
	}
	var amount int64
	if err := h.QueryRowContext(ctx, "SELECT amount FROM "+name).Scan(&amount); err != nil {
		t.Fatal(err)
	}
	if amount != 100 {
		t.Errorf("observe mode did not write the row (amount %d, want 100)", amount)
	}
}
