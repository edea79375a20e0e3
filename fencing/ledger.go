package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Ledger makes an action that cannot check a token (an SMS, a payment API
// call) happen at most once per action key: Once first inserts a row for the
// key into the ledger table, in the same database as your data, and runs the
// action only if that insert created the row. A second attempt — a paused
// holder that wakes up, a retry, a second worker — finds the row and skips.
//
// Which tool fits:
//   - the write lands in a table you own: Table.Update (the row checks the token);
//   - several statements must see one check: Table.InTx;
//   - your own HTTP API is the resource: Middleware;
//   - a side effect outside your storage: Ledger (at most once per key; pick
//     keys that name the effect, e.g. "sms:order-77:shipped").
type Ledger struct {
	d     *Dialect
	table string // quoted
}

// Ledger entry states.
const (
	LedgerStarted = "started" // the action began; if it stays so, the process died mid-action
	LedgerDone    = "done"
	LedgerFailed  = "failed" // the action returned an error; Forget allows a retry
)

// NewLedger returns a ledger kept in table (create it with EnsureTable).
func NewLedger(d *Dialect, table string) (*Ledger, error) {
	q, err := d.quote(table)
	if err != nil {
		return nil, err
	}
	return &Ledger{d: d, table: q}, nil
}

// EnsureTable creates the ledger table if it does not exist.
func (l *Ledger) EnsureTable(ctx context.Context, db DB) error {
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+l.table+
		" (action_key VARCHAR(255) NOT NULL PRIMARY KEY, token BIGINT NOT NULL, state VARCHAR(16) NOT NULL, detail VARCHAR(1000))")
	if err != nil {
		return fmt.Errorf("fencing: create ledger %s: %w", l.table, err)
	}
	return nil
}

// Once runs action at most once for key. It returns ran=false, with no error,
// when the key is already in the ledger (done, failed, or started by someone
// else). A failed action stays recorded with its error: the side effect may
// have happened; call Forget to allow another attempt.
func (l *Ledger) Once(ctx context.Context, db DB, key string, token Token, action func(ctx context.Context) error) (ran bool, err error) {
	if key == "" || len(key) > 255 {
		return false, fmt.Errorf("fencing: ledger key must be 1–255 bytes, got %d", len(key))
	}
	q := &query{d: l.d}
	switch l.d {
	case MySQL:
		q.text("INSERT IGNORE INTO ", l.table)
	default:
		q.text("INSERT INTO ", l.table)
	}
	q.text(" (action_key, token, state) VALUES (").arg(key).text(", ").arg(int64(token)).text(", ").arg(LedgerStarted).text(")")
	if l.d != MySQL {
		q.text(" ON CONFLICT (action_key) DO NOTHING")
	}
	res, err := db.ExecContext(ctx, q.sql.String(), q.args...)
	if err != nil {
		return false, fmt.Errorf("fencing: ledger insert %q: %w", key, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	actErr := action(ctx)
	state, detail := LedgerDone, ""
	if actErr != nil {
		state, detail = LedgerFailed, actErr.Error()
		if len(detail) > 1000 {
			detail = detail[:1000]
		}
	}
	u := &query{d: l.d}
	u.text("UPDATE ", l.table, " SET state = ").arg(state).text(", detail = ").arg(detail).text(" WHERE action_key = ").arg(key)
	if _, err := db.ExecContext(context.WithoutCancel(ctx), u.sql.String(), u.args...); err != nil {
		return true, fmt.Errorf("fencing: ledger mark %q %s: %w (action error: %v)", key, state, err, actErr)
	}
	return true, actErr
}

// State returns the ledger state of key ("" if absent).
func (l *Ledger) State(ctx context.Context, db DB, key string) (string, error) {
	q := &query{d: l.d}
	q.text("SELECT state FROM ", l.table, " WHERE action_key = ").arg(key)
	var s string
	err := db.QueryRowContext(ctx, q.sql.String(), q.args...).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return s, err
}

// Forget removes key, so a later Once may run its action again.
func (l *Ledger) Forget(ctx context.Context, db DB, key string) error {
	q := &query{d: l.d}
	q.text("DELETE FROM ", l.table, " WHERE action_key = ").arg(key)
	_, err := db.ExecContext(ctx, q.sql.String(), q.args...)
	return err
}
