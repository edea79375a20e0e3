package fencing

import (
	"context"
	"fmt"
	"strings"
)

// Insert creates the row with this key, set's columns and the token as its
// fence, in ONE statement that never overwrites a row:
//
//	INSERT INTO t (key, col…, fence) VALUES (…) ON CONFLICT (key) DO NOTHING
//
// (with a DeletedColumn, a tombstone whose fence is at most token is
// revived instead: DO UPDATE … WHERE deleted <> 0 AND fence <= token).
// It returns nil if it created (or revived) the row; an error matching
// ErrExists if a live row with this key exists, written with this token or
// an older one (Update or Upsert it); one matching ErrStale (a
// *StaleError) if a newer token has written the row, live or deleted.
// Columns not in set get their defaults.
//
// The key columns must be the table's primary key or a unique index (on
// MySQL, where ON DUPLICATE KEY fires on any unique index, give the table
// no other unique index). db may be the caller's transaction, as for
// Update. On MySQL, leave the DSN's clientFoundRows off (the driver's
// default): with it, MySQL counts a row an INSERT left alone as it counts
// a new row, so an Insert or Upsert fails, in every Mode, unless it
// updates an existing row: the row may or may not have been written.
func (t *Table) Insert(ctx context.Context, db DB, token Token, key any, set map[string]any) error {
	return t.InsertVia(ctx, sqlRunner{db}, token, key, set)
}

// InsertVia is Insert through any Runner (fencingpgx.Runner for pgx).
func (t *Table) InsertVia(ctx context.Context, r Runner, token Token, key any, set map[string]any) error {
	return t.write(ctx, r, opInsert, credential{token: token}, key, set, t.cfg.Limit)
}

// Upsert writes set to the row with this key, creating it if there is
// none, in ONE statement that checks and records the token:
//
//	INSERT INTO t (key, col…, fence) VALUES (…)
//	ON CONFLICT (key) DO UPDATE SET col = EXCLUDED.col…, fence = EXCLUDED.fence
//	WHERE t.fence <= EXCLUDED.fence
//
// (MySQL: ON DUPLICATE KEY UPDATE col = IF(guard, VALUES(col), col)…, the
// fence last). It returns nil if the row was created or written, and an
// error matching ErrStale (a *StaleError) if a newer token has written the
// row. A tombstone (DeletedColumn) is revived by an equal or higher token
// and refuses a lower one: a stale holder cannot bring back a row a newer
// holder deleted. A new row gets defaults for columns not in set; an
// existing one keeps them. Equal tokens pass, as for Update; write whole
// values. The key and MySQL rules of Insert apply.
func (t *Table) Upsert(ctx context.Context, db DB, token Token, key any, set map[string]any) error {
	return t.UpsertVia(ctx, sqlRunner{db}, token, key, set)
}

// UpsertVia is Upsert through any Runner.
func (t *Table) UpsertVia(ctx context.Context, r Runner, token Token, key any, set map[string]any) error {
	return t.write(ctx, r, opUpsert, credential{token: token}, key, set, t.cfg.Limit)
}

// Delete turns the row with this key into a tombstone, in ONE statement
// that checks and records the token:
//
//	UPDATE t SET deleted = 1, fence = $token WHERE key = … AND fence <= $token
//
// The row stays, with its fence: a stale holder's later Insert or Upsert
// gets ErrStale instead of creating the row again under an older token,
// which a DELETE would allow. So Delete needs TableConfig.DeletedColumn,
// and your reads must skip tombstones (WHERE deleted = 0); purge old
// tombstones yourself once no holder of an older token can be alive.
// It returns nil if the row is now a tombstone (deleting one again is no
// error), ErrStale if a newer token has written it, ErrNoRow if there is
// no row with this key. That leaves no tombstone: to keep an older token
// from creating a row that was never there, Insert it, then Delete it.
func (t *Table) Delete(ctx context.Context, db DB, token Token, key any) error {
	return t.DeleteVia(ctx, sqlRunner{db}, token, key)
}

// DeleteVia is Delete through any Runner.
func (t *Table) DeleteVia(ctx context.Context, r Runner, token Token, key any) error {
	return t.write(ctx, r, opDelete, credential{token: token}, key, nil, t.cfg.Limit)
}

// CompareAndSet writes set to the row with this key if its version column
// (TableConfig.VersionColumn) still holds expected, and adds one to the
// version, in ONE statement, with no token and no lock at all:
//
//	UPDATE t SET col = …, version = version + 1 WHERE key = … AND version = $expected
//
// Read the row and its version, compute, then CompareAndSet with the
// version you read: nil means no other write came between (the version is
// now expected+1); an error matching ErrConflict (a *ConflictError with
// the version found) means one did, and nothing was written: read again
// and retry. ErrNoRow if there is no row (or only a tombstone).
//
// It is all you need for a short read-modify-write of rows in one database
// (a counter, a status change, a document edit): the database is the one
// place that sees every writer. It does not replace a lock (a lease with a
// fencing token) when the work takes long, touches something outside this
// database, or must not be done twice: CAS only makes the losing writer
// fail at the end. Mode does not apply (there is no token); a table with
// a Verifier refuses it with ErrBadSignature.
func (t *Table) CompareAndSet(ctx context.Context, db DB, key any, expected int64, set map[string]any) error {
	return t.CompareAndSetVia(ctx, sqlRunner{db}, key, expected, set)
}

// CompareAndSetVia is CompareAndSet through any Runner.
func (t *Table) CompareAndSetVia(ctx context.Context, r Runner, key any, expected int64, set map[string]any) error {
	if t.version == "" {
		return fmt.Errorf("fencing: table %s: CompareAndSet needs TableConfig.VersionColumn", t.cfg.Name)
	}
	if t.cfg.Verifier != nil {
		return &SignatureError{Resource: t.cfg.Name, Reason: "CompareAndSet carries no token, and this table takes signed tokens only (TableConfig.Verifier)"}
	}
	if expected < 0 {
		return fmt.Errorf("fencing: table %s: CompareAndSet with version %d: versions start at 0", t.cfg.Name, expected)
	}
	keys, cols, err := t.keysAndColumns(key, set)
	if err != nil {
		return err
	}
	q := &query{d: t.cfg.Dialect}
	q.text("UPDATE ", t.name, " SET ")
	for _, c := range cols {
		q.text(c.quoted, " = ").arg(set[c.name]).text(", ")
	}
	q.text(t.version, " = ", t.version, " + 1")
	t.where(q, keys)
	t.whereLive(q, "")
	q.text(" AND ", t.version, " = ").arg(expected)
	n, err := r.Exec(ctx, q.sql.String(), q.args...)
	if err != nil {
		return fmt.Errorf("fencing: compare-and-set %s: %w", t.cfg.Name, err)
	}
	if n > 0 { // the version always changes, so MySQL counts the row
		return nil
	}
	q = &query{d: t.cfg.Dialect}
	q.text("SELECT ", t.version, " FROM ", t.name)
	t.where(q, keys)
	t.whereLive(q, "")
	q.text(t.cfg.Dialect.lockRead)
	actual, found, err := r.QueryInt64(ctx, q.sql.String(), q.args...)
	if err != nil {
		return fmt.Errorf("fencing: read %s.%s: %w", t.cfg.Name, t.cfg.VersionColumn, err)
	}
	if !found {
		return fmt.Errorf("%w in %s with key %v", ErrNoRow, t.cfg.Name, keys)
	}
	return &ConflictError{Resource: t.cfg.Name, Key: key, Expected: expected, Actual: actual}
}

// whereLive adds, for a table with tombstones, that the row (prefix.) is
// not one.
func (t *Table) whereLive(q *query, prefix string) {
	if t.deleted != "" {
		q.text(" AND ", prefix, t.deleted, " = 0")
	}
}

// assignments writes a comma-separated list.
type assignments struct {
	q *query
	n int
}

func (a *assignments) next() *query {
	if a.n > 0 {
		a.q.text(", ")
	}
	a.n++
	return a.q
}

// statement builds o's one statement: guarded by token (and a Limit's
// MaxJump) if token is not nil; else plain (Off mode, or a stale write
// Observe mode lets through), which neither reads nor writes the fence.
// Tombstones and the version are kept in every mode.
func (t *Table) statement(o op, token *Token, keys []any, exact []string, cols []column, set map[string]any, maxJump Token) *query {
	q := &query{d: t.cfg.Dialect}
	if o.inserts() {
		t.insertStatement(q, o, token, keys, cols, set, maxJump)
		return q
	}
	q.text("UPDATE ", t.name, " SET ")
	a := &assignments{q: q}
	for _, c := range cols {
		a.next().text(c.quoted, " = ").arg(set[c.name])
	}
	if o == opDelete {
		a.next().text(t.deleted, " = 1")
	}
	if t.version != "" {
		a.next().text(t.version, " = ", t.version, " + 1")
	}
	if token != nil {
		a.next().text(t.fence, " = ").arg(int64(*token))
	}
	t.where(q, keys)
	t.whereExact(q, exact)
	if o == opUpdate {
		t.whereLive(q, "")
	}
	if token != nil {
		q.text(" AND ")
		t.guard(q, "", func() { q.arg(int64(*token)) }, *token, maxJump)
	}
	return q
}

// insertStatementAlias names the existing row in Postgres's and SQLite's
// ON CONFLICT DO UPDATE (EXCLUDED is the row offered).
const insertStatementAlias = "fencing_row"

// insertStatement builds an Insert's or an Upsert's INSERT … ON CONFLICT
// (Postgres, SQLite) or INSERT … ON DUPLICATE KEY UPDATE (MySQL).
func (t *Table) insertStatement(q *query, o op, token *Token, keys []any, cols []column, set map[string]any, maxJump Token) {
	d := t.cfg.Dialect
	q.text("INSERT INTO ", t.name)
	if d != MySQL {
		q.text(" AS ", insertStatementAlias)
	}
	names := &assignments{q: q.text(" (")}
	for _, k := range t.key {
		names.next().text(k)
	}
	for _, c := range cols {
		names.next().text(c.quoted)
	}
	if token != nil {
		names.next().text(t.fence)
	}
	if t.deleted != "" {
		names.next().text(t.deleted)
	}
	values := &assignments{q: q.text(") VALUES (")}
	for _, k := range keys {
		values.next().arg(k)
	}
	for _, c := range cols {
		values.next().arg(set[c.name])
	}
	if token != nil {
		values.next().arg(int64(*token))
	}
	if t.deleted != "" {
		values.next().text("0")
	}
	q.text(")")

	// What an existing row gets: the offered columns, a version step, the
	// token, alive again; Insert touches tombstones only.
	if o == opInsert && t.deleted == "" || len(cols) == 0 && token == nil && t.deleted == "" && t.version == "" {
		q.text(d.onConflictDoNothing(t.key...))
		return
	}
	mysql := d == MySQL
	existing := insertStatementAlias + "."
	offered := func(col string) { q.text("excluded.", col) }
	if mysql {
		existing = ""
		offered = func(col string) { q.text("VALUES(", col, ")") }
	}
	// cond is when an existing row is written; nil for always.
	var cond func()
	if o == opInsert || token != nil {
		cond = func() {
			and := ""
			if mysql { // ON DUPLICATE KEY fires on any unique index: only on the key
				for _, k := range t.key {
					q.text(and, k, " = ")
					offered(k)
					and = " AND "
				}
			}
			if o == opInsert {
				q.text(and, existing, t.deleted, " <> 0")
				and = " AND "
			}
			if token != nil {
				q.text(and)
				t.guard(q, existing, func() { offered(t.fence) }, *token, maxJump)
			}
		}
	}
	if mysql {
		q.text(" ON DUPLICATE KEY UPDATE ")
	} else {
		q.text(" ON CONFLICT (", strings.Join(t.key, ", "), ") DO UPDATE SET ")
	}
	a := &assignments{q: q}
	assign := func(col string, value func()) {
		a.next().text(col, " = ")
		if !mysql || cond == nil {
			value()
			return
		}
		// MySQL: each column IF(cond, new, old). Assignments run left to
		// right, each seeing the ones before, so cond must read the same
		// in every IF: the tombstone mark, which Insert's cond reads, goes
		// last. (The fence could go anywhere: once raised to the token,
		// the guard still holds.)
		q.text("IF(")
		cond()
		q.text(", ")
		value()
		q.text(", ", col, ")")
	}
	for _, c := range cols {
		assign(c.quoted, func() { offered(c.quoted) })
	}
	if t.version != "" {
		assign(t.version, func() { q.text(existing, t.version, " + 1") })
	}
	if token != nil {
		assign(t.fence, func() { offered(t.fence) })
	}
	if t.deleted != "" {
		assign(t.deleted, func() { q.text("0") })
	}
	if !mysql && cond != nil {
		q.text(" WHERE ")
		cond()
	}
}

// guard writes the token check on the fence of the row (prefix.): at most
// the token, and, with a MaxJump, not far below it unless no token has
// written the row yet. tok writes the token.
func (t *Table) guard(q *query, prefix string, tok func(), token, maxJump Token) {
	q.text(prefix, t.fence, " <= ")
	tok()
	if maxJump != 0 && token > maxJump {
		q.text(" AND (", prefix, t.fence, " = 0 OR ", prefix, t.fence, " >= ").arg(int64(token - maxJump)).text(")")
	}
}
