package fencing_test

import (
	"context"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// Found by a review (fixed: the row guard compares a domain's base type): Postgres exactText now reads
//
//	CASE WHEN pg_typeof(k) IN ('smallint'::regtype, ..., 'character varying'::regtype, ...) THEN CAST(k AS TEXT) END
//
// but pg_typeof of a column whose type is a DOMAIN is the domain itself
// (e.g. "sku"), never its base type. checkKeyTypes still accepts such a
// column — information_schema.columns.data_type is the domain's base type
// ("character varying", with domain_name set) — so a table keyed by a domain
// over VARCHAR/TEXT/INTEGER passes the type check, and then every row's exact
// text is NULL: no signed write ever matches, checkExact calls each one "not
// the row's key as the database stores it", and Enforce mode refuses every
// signed write (Observe mode lets every write through unfenced, reporting a
// refusal each time). Before dd8970a (CAST(k AS TEXT) COLLATE "C") the same
// table worked: this is a regression for a common schema pattern
// (CREATE DOMAIN sku AS varchar(32) CHECK (...)).
// Fix: compare the base type, e.g.
//
//	(SELECT CASE WHEN typtype = 'd' THEN typbasetype ELSE oid END FROM pg_type WHERE oid = pg_typeof(k)) IN (...)
//
// (one level, as information_schema's _pg_truetypid does), or refuse domain
// key columns in checkKeyTypes too (AND domain_name IS NULL) so the two
// checks agree and the error says why.
func TestSignedDomainKey(t *testing.T) {
	db := dbtest.Postgres()
	ctx := context.Background()
	pub, s := newKey(t)
	h := dbtest.Open(t, db)
	name := dbtest.Table(t, h)
	domain := name + "_sku"
	mustExec(t, h, "CREATE DOMAIN "+domain+" AS VARCHAR(64) CHECK (VALUE <> '')")
	t.Cleanup(func() { h.Exec("DROP DOMAIN IF EXISTS " + domain + " CASCADE") })
	mustExec(t, h, "CREATE TABLE "+name+" (id "+domain+" PRIMARY KEY, amount BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, h, "INSERT INTO "+name+" (id, amount) VALUES ('a1', 0)")

	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"},
		Verifier: newVerifier(t, pub), LockName: func(k []string) string { return "sku/" + k[0] }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	err = tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "sku/a1", 5), "a1", map[string]any{"amount": 7})
	var amount, fence int64
	if qerr := h.QueryRowContext(ctx, "SELECT amount, fence FROM "+name).Scan(&amount, &fence); qerr != nil {
		t.Fatal(qerr)
	}
	if err != nil || amount != 7 || fence != 5 {
		t.Errorf("a signed write of the holder of sku/a1 to a table keyed by a domain over VARCHAR (accepted by the key-type check): err %v, row amount %d fence %d (want nil, 7, 5): pg_typeof names the domain, so the exact-key CASE is NULL for every row", err, amount, fence)
	}
}
