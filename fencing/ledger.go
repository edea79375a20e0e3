package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Ledger makes an action that cannot check a token (an SMS, a payment API
// call) happen at most once per action key: Once first claims the key in
// the ledger table, in the same database as your data, and runs the action
// only if it got the claim. A second attempt — a paused holder that wakes
// up, a retry, a second worker — finds the claim and skips.
//
// Claims are fenced by token, like rows (the key's row records the token
// that claimed it):
//   - a claim with a lower token than the one recorded for the key is
//     refused with a *StaleError (matches ErrStale), whatever the state:
//     a newer holder owns the key, stop;
//   - an equal or higher token finds "done" or "failed" and skips (ran is
//     false, no error): the action happened, or may have;
//   - it finds "started" and skips while the claim is younger than
//     ReclaimAfter (its holder is still at work);
//   - a higher token reclaims a "started" claim older than ReclaimAfter: its
//     holder's lease has ended (a newer grant exists) and it has had longer
//     than its action may take (Once cancels the action's context after
//     ReclaimAfter/2), so it died between claiming and recording the outcome.
//     The action runs again, under the new token. This is the one case in
//     which it can happen twice: the dead holder may have performed it
//     without living to record it. Where even that must not happen, pass
//     the ledger key to the provider as its idempotency key, or set
//     ReclaimAfter negative and resolve stuck claims by hand (State, Forget).
//     A holder whose claim was reclaimed learns it when it records its
//     outcome: Once returns ran=true with an error matching ErrStale.
//
// Claims are timed by the database's clock, one clock for every worker (on
// MySQL @@timestamp: do not SET timestamp on the connections you pass).
// On SQLite, which has one writer at a time, do not call Once while your
// own write transaction is open: the claim would wait for it.
//
// Once takes a *sql.DB or *sql.Conn, never a *sql.Tx (LedgerDB): the claim
// must be committed before the action runs. Inside a transaction that later
// rolled back, the claim would vanish and the action run again. Record what
// the action did in your own tables afterwards, in your own transaction.
//
// Which tool fits:
//   - the write lands in a table you own: Table.Update, Insert, Upsert or
//     Delete (the row checks the token);
//   - several statements must see one check: Table.InTx;
//   - your own HTTP API is the resource: Middleware;
//   - a side effect outside your storage: Ledger (at most once per key; pick
//     keys that name the effect, e.g. "sms:order-77:shipped").
//
// A Ledger is safe for concurrent use; set ReclaimAfter before first use.
type Ledger struct {
	// ReclaimAfter is how old a "started" claim must be before a higher
	// token may reclaim it; 0 means DefaultReclaimAfter, negative never.
	// Once gives the action a context that ends after ReclaimAfter/2.
	ReclaimAfter time.Duration
	// Verifier, if set, makes every claim carry a signed token (OnceSigned)
	// issued for the lock that LockName names for the action key; a plain
	// token, a forged or altered one, or one for another lock is refused
	// with an error matching ErrBadSignature and claims nothing.
	Verifier *Verifier
	// LockName returns the lock whose holders may perform the action with
	// this key (e.g. "orders/77" for "sms:order-77:shipped"). Required with
	// Verifier.
	LockName func(actionKey string) string

	d     *Dialect
	name  string
	table string // quoted
}

// DefaultReclaimAfter is a Ledger's ReclaimAfter unless set: an hour, the
// longest lease a fence server grants by default.
const DefaultReclaimAfter = time.Hour

// LedgerDB is what Once needs: *sql.DB or *sql.Conn, each statement
// committed on its own. *sql.Tx does not satisfy it (it cannot begin a
// transaction), so passing one is a compile error. Do not pass a *sql.Conn
// on which you ran BEGIN yourself.
type LedgerDB interface {
	DB
	TxBeginner
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
	return &Ledger{d: d, name: table, table: q}, nil
}

// EnsureTable creates the ledger table if it does not exist, and adds the
// started_at column to a ledger created by an earlier version (its
// "started" claims then count as old: a higher token may reclaim them).
func (l *Ledger) EnsureTable(ctx context.Context, db DB) error {
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+l.table+
		" (action_key "+l.d.keyType+" NOT NULL PRIMARY KEY, token BIGINT NOT NULL, state VARCHAR(16) NOT NULL, detail VARCHAR(1000),"+
		" started_at BIGINT NOT NULL DEFAULT 0)")
	if err != nil {
		return fmt.Errorf("fencing: create ledger %s: %w", l.table, err)
	}
	if err := l.d.binaryKey(ctx, sqlRunner{db}, l.name, l.table, "action_key"); err != nil {
		return err
	}
	return addColumn(ctx, sqlRunner{db}, l.d, l.name, l.table, "started_at", l.d.quoteChar+"started_at"+l.d.quoteChar)
}

// reclaimAfter returns ReclaimAfter (its default for 0) and whether
// reclaims are on at all.
func (l *Ledger) reclaimAfter() (time.Duration, bool) {
	switch {
	case l.ReclaimAfter < 0:
		return 0, false
	case l.ReclaimAfter == 0:
		return DefaultReclaimAfter, true
	}
	return l.ReclaimAfter, true
}

// Once runs action at most once for key, fenced by token (see Ledger for
// the rules). It returns ran=false, with no error, when the key is done,
// failed, or started and not yet reclaimable; ran=false with an error
// matching ErrStale when a higher token has claimed the key. A failed action
// stays recorded with its error: the side effect may have happened; call
// Forget to allow another attempt.
func (l *Ledger) Once(ctx context.Context, db LedgerDB, key string, token Token, action func(ctx context.Context) error) (ran bool, err error) {
	if l.Verifier != nil {
		return false, &SignatureError{Resource: key, Reason: "a plain token, and this ledger takes signed tokens only (Ledger.Verifier): pass Lease.SignedToken to OnceSigned"}
	}
	return l.once(ctx, db, key, token, action)
}

// OnceSigned is Once with a signed token (Lease.SignedToken), for a ledger
// with a Verifier: the claim is made only if the token's signature is valid
// and it was issued for the lock Ledger.LockName names for key; otherwise
// it fails with an error matching ErrBadSignature and claims nothing.
func (l *Ledger) OnceSigned(ctx context.Context, db LedgerDB, key string, signed string, action func(ctx context.Context) error) (ran bool, err error) {
	if l.Verifier == nil || l.LockName == nil {
		return false, fmt.Errorf("fencing: ledger %s has no Verifier and LockName to check a signed token", l.name)
	}
	token, err := l.Verifier.VerifyFor(signed, l.LockName(key), key)
	if err != nil {
		return false, err
	}
	return l.once(ctx, db, key, token, action)
}

// once is Once after the token's checks.
func (l *Ledger) once(ctx context.Context, db LedgerDB, key string, token Token, action func(ctx context.Context) error) (ran bool, err error) {
	if key == "" || len(key) > 255 {
		return false, fmt.Errorf("fencing: ledger key must be 1–255 bytes, got %d", len(key))
	}
	if token == 0 || token > maxBigint {
		return false, fmt.Errorf("fencing: ledger token must be 1 to 2⁶³−1, got %d", token)
	}
	claimed, err := l.claim(ctx, db, key, token)
	if !claimed || err != nil {
		return false, err
	}
	actCtx, cancel := ctx, context.CancelFunc(func() {})
	if ra, on := l.reclaimAfter(); on {
		actCtx, cancel = context.WithTimeout(ctx, ra/2)
	}
	actErr := action(actCtx)
	cancel()
	state, detail := LedgerDone, ""
	if actErr != nil {
		state, detail = LedgerFailed, ledgerDetail(actErr.Error())
	}
	// Record the outcome only if the claim is still ours. The state
	// changes in every row this matches, so MySQL counts it with or
	// without clientFoundRows.
	u := &query{d: l.d}
	u.text("UPDATE ", l.table, " SET state = ").arg(state).text(", detail = ").arg(detail).
		text(" WHERE action_key = ").arg(key).text(" AND token = ").arg(int64(token)).text(" AND state = ").arg(LedgerStarted)
	res, err := db.ExecContext(context.WithoutCancel(ctx), u.sql.String(), u.args...)
	if err != nil {
		return true, fmt.Errorf("fencing: ledger mark %q %s: %w (action error: %v)", key, state, err, actErr)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return true, fmt.Errorf("fencing: ledger mark %q %s: %w (action error: %v)", key, state, err, actErr)
	}
	if n == 0 {
		highest, _, err := l.read(context.WithoutCancel(ctx), db, key)
		return true, errors.Join(fmt.Errorf("fencing: ledger %q: the action ran, but a newer holder reclaimed the claim and may run it again: %w",
			key, &StaleError{Resource: key, Offered: token, Highest: highest}), err, actErr)
	}
	return true, actErr
}

// claim takes key for token: a new row, or the reclaim of a stuck one.
// claimed=false with a nil error means someone else's claim stands.
//
// Each statement's count of rows says who won, on MySQL whatever the DSN
// says of clientFoundRows (with it, a statement counts the rows it found,
// even those it left alone): the INSERT touches no existing row
// (Dialect.insertNew), and the reclaim's UPDATE changes every row it
// matches (the token rises).
func (l *Ledger) claim(ctx context.Context, db DB, key string, token Token) (claimed bool, err error) {
	start, end := l.d.insertNew(l.table, "action_key")
	for attempt := 0; attempt < 3; attempt++ {
		q := &query{d: l.d}
		q.text(start, " (action_key, token, state, started_at) VALUES (").arg(key).text(", ").
			arg(int64(token)).text(", ").arg(LedgerStarted).text(", ", l.d.nowMicros, ")", end)
		n, err := l.exec(ctx, db, key, q)
		switch {
		case err != nil:
			return false, err
		case n == 1 && l.d == MySQL:
			return l.addedAsWritten(ctx, db, key, token)
		case n == 1:
			return true, nil
		}
		if ra, on := l.reclaimAfter(); on {
			// One statement, so two reclaimers cannot both win.
			q := &query{d: l.d}
			q.text("UPDATE ", l.table, " SET token = ").arg(int64(token)).text(", started_at = ", l.d.nowMicros, ", detail = NULL").
				text(" WHERE action_key = ").arg(key).text(" AND state = ").arg(LedgerStarted).
				text(" AND token < ").arg(int64(token)).text(" AND started_at <= ", l.d.nowMicros, " - ").arg(ra.Microseconds())
			if n, err := l.exec(ctx, db, key, q); err != nil || n == 1 {
				return n == 1, err
			}
		}
		recorded, found, err := l.read(ctx, db, key)
		if err != nil {
			return false, err
		}
		if !found {
			continue // forgotten meanwhile: claim again
		}
		if recorded > token {
			return false, &StaleError{Resource: key, Offered: token, Highest: recorded}
		}
		return false, nil
	}
	return false, fmt.Errorf("fencing: ledger %q kept changing under the claim; retry", key)
}

// addedAsWritten reads back the claim that MySQL's INSERT IGNORE counted
// as added: key's row must be started, with token. INSERT IGNORE would
// also cut a value too long for its column to fit (in a table made
// otherwise than by EnsureTable) and add that row, under another key.
func (l *Ledger) addedAsWritten(ctx context.Context, db DB, key string, token Token) (bool, error) {
	q := &query{d: l.d}
	q.text("SELECT token FROM ", l.table, " WHERE action_key = ").arg(key).text(" AND state = ").arg(LedgerStarted)
	recorded, found, err := sqlRunner{db}.QueryInt64(ctx, q.sql.String(), q.args...)
	switch {
	case err != nil:
		return false, fmt.Errorf("fencing: ledger read %q: %w", key, err)
	case found && Token(recorded) == token:
		return true, nil
	case found && Token(recorded) > token: // reclaimed at once
		return false, &StaleError{Resource: key, Offered: token, Highest: Token(recorded)}
	}
	return false, fmt.Errorf("fencing: ledger claim %q: MySQL counted the claim as added, but the key has no started claim with token %d (a value cut to fit a column? create the table with EnsureTable; or Forget ran at once): not claimed", key, token)
}

func (l *Ledger) exec(ctx context.Context, db DB, key string, q *query) (int64, error) {
	res, err := db.ExecContext(ctx, q.sql.String(), q.args...)
	if err != nil {
		return 0, fmt.Errorf("fencing: ledger claim %q: %w", key, err)
	}
	return res.RowsAffected()
}

// read returns the token recorded for key.
func (l *Ledger) read(ctx context.Context, db DB, key string) (Token, bool, error) {
	q := &query{d: l.d}
	q.text("SELECT token FROM ", l.table, " WHERE action_key = ").arg(key)
	v, found, err := sqlRunner{db}.QueryInt64(ctx, q.sql.String(), q.args...)
	if err != nil {
		return 0, false, fmt.Errorf("fencing: ledger read %q: %w", key, err)
	}
	return Token(v), found, nil
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

// ledgerDetail is an action's error message as the detail column can take
// it, so that marking the action failed cannot fail on its text: valid
// UTF-8 without NUL bytes (Postgres and MySQL's utf8mb4 refuse both), at
// most 1000 bytes, cut between characters.
func ledgerDetail(msg string) string {
	msg = strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
	if len(msg) <= 1000 {
		return msg
	}
	cut := 1000
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}
