package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
)

// Mode is how a Table treats tokens. Switch it at run time with SetMode.
type Mode int32

// Modes, in rollout order: Off → Observe → Enforce. The zero value is Enforce.
const (
	// Enforce: a write with a stale token changes nothing and fails with ErrStale.
	Enforce Mode = iota
	// Observe: every write goes through; one that Enforce would refuse is
	// counted (Observer) and logged with both tokens. Writes still record
	// their token, so the fence column fills up before you enforce; a write
	// whose token is above the Limit goes through without recording it.
	Observe
	// Off: plain writes; the fence column is neither read nor written (it
	// need not exist yet).
	Off
)

var modeNames = [...]string{Enforce: "enforce", Observe: "observe", Off: "off"}

func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", int32(m))
}

// MarshalText implements encoding.TextMarshaler.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses "off", "observe" or "enforce" (flags, config files, env).
func (m *Mode) UnmarshalText(b []byte) error {
	for i, n := range modeNames {
		if string(b) == n {
			*m = Mode(i)
			return nil
		}
	}
	return fmt.Errorf("fencing: mode %q: use off, observe or enforce", b)
}

// Observer receives every stale write a Table sees: refused (Enforce) or let
// through (Observe). It must be safe for concurrent use and must not block.
// Package fencingmetrics turns it into Prometheus counters.
type Observer interface {
	Stale(table string, mode Mode, offered, highest Token)
}

// RefusalObserver is an Observer that is also told of every write refused
// (Enforce) or let through (Observe) for what its token is rather than its
// age: above the Limit (err matches ErrTooHigh) or a signed token refused
// (ErrBadSignature). fencingmetrics.Observer implements it.
type RefusalObserver interface {
	Observer
	Refused(table string, mode Mode, err error)
}

// WriteObserver is an Observer that is also told of every write a Table
// (or request Middleware) checked by its token, with the writer's context
// (the request's), after the write (Middleware: after the request):
// package fencingotel puts the token and the lock on the writer's trace
// span. It runs on the writing goroutine and must not block.
type WriteObserver interface {
	Observer
	Checked(ctx context.Context, w CheckedWrite)
}

// CheckedWrite is one write a Table checked by its token, or one request
// Middleware checked (Table "http", Mode Enforce, Lock the request's lock:
// LockName or the resource; Err set when it was refused).
type CheckedWrite struct {
	Table string // TableConfig.Name
	Mode  Mode   // the table's mode for this write (Off: the token was not checked)
	// Token is the token offered (a signed one's, once verified; 0 if it
	// did not verify).
	Token Token
	// Lock is the lock the token was issued for, where the table knows it:
	// a verified signed token's lock, or TableConfig.LockName of the row's
	// key (of integer or string types); "" otherwise.
	Lock string
	// Lease is the holder's lease number, which only a verified signed
	// token states (0 otherwise).
	Lease uint64
	// Stale is set when a newer token had written the row: the write was
	// refused (Enforce: Err is Stale) or let through (Observe).
	Stale *StaleError
	// Err is what the write returned; nil: it was written.
	Err error
}

// observeRefusal tells o of a refusal if it listens for them.
func observeRefusal(o Observer, table string, mode Mode, err error) {
	if ro, ok := o.(RefusalObserver); ok {
		ro.Refused(table, mode, err)
	}
}

// TableConfig describes a table whose rows carry a fence column.
type TableConfig struct {
	Dialect *Dialect // required: Postgres, MySQL or SQLite
	Name    string   // the table, optionally schema-qualified ("app.totals")
	Key     []string // the columns that identify one row
	// FenceColumn holds the highest token that wrote the row (default "fence").
	FenceColumn string
	// DeletedColumn, if set, makes Delete keep the row as a tombstone
	// (this column 1, the fence at the deleting token) instead of removing
	// it, so that a stale holder's Insert or Upsert cannot bring the row
	// back under an older token. Update and CompareAndSet treat a tombstone
	// as no row (ErrNoRow); Insert and Upsert with a token at least its
	// fence revive it. Delete needs it. EnsureColumn adds it (BIGINT NOT
	// NULL DEFAULT 0); unlike the fence column it is used in every mode.
	// Your reads must skip rows where it is not 0.
	DeletedColumn string
	// VersionColumn, if set, is the version CompareAndSet compares; every
	// write through the Table, in every mode, adds one to it, so that a
	// compare-and-set based on a read from before any of them fails with
	// ErrConflict. CompareAndSet needs it. EnsureColumn adds it (BIGINT
	// NOT NULL DEFAULT 0).
	VersionColumn string
	// Mode is the initial mode; the zero value is Enforce.
	Mode Mode
	// Limit refuses tokens far above what was issued (see Limit); the zero
	// Limit accepts any token that fits the BIGINT column (< 1<<63).
	Limit    Limit
	Observer Observer     // optional
	Logger   *slog.Logger // for Observe mode's reports; nil means slog.Default()
	// Verifier, if set, makes every write carry a signed token (UpdateSigned,
	// InTxSigned) issued for the lock that LockName names for the row; a
	// plain token, a forged or altered one, or one for another lock is
	// refused with an error matching ErrBadSignature and changes nothing.
	Verifier *Verifier
	// LockName returns the lock whose holders may write the row whose key
	// columns read as key, as text, in the order of Key (e.g. "totals/77"
	// for ["77"]). Required with Verifier. A signed write matches its row
	// only if the stored key reads exactly so (an integer column: "77",
	// never "077" or "77.0"; a text column: byte for byte, whatever the
	// collation), so pass key values of integer or string types, as stored.
	LockName func(key []string) string
}

// Table performs guarded writes on one table. Safe for concurrent use.
type Table struct {
	cfg   TableConfig
	name  string   // quoted
	key   []string // quoted
	fence string   // quoted
	// deleted and version are quoted, "" if not configured.
	deleted, version string
	mode             atomic.Int32
	// keyTypesOK: the key columns were found to be of types whose text is
	// fixed (checkKeyTypes), once, before the first signed write.
	keyTypesOK atomic.Bool
}

// NewTable checks cfg and returns a Table.
func NewTable(cfg TableConfig) (*Table, error) {
	if cfg.Dialect == nil {
		return nil, errors.New("fencing: TableConfig.Dialect is required (fencing.Postgres, fencing.MySQL or fencing.SQLite)")
	}
	if len(cfg.Key) == 0 {
		return nil, fmt.Errorf("fencing: table %q: name its key column(s)", cfg.Name)
	}
	if cfg.FenceColumn == "" {
		cfg.FenceColumn = "fence"
	}
	if cfg.Verifier != nil && cfg.LockName == nil {
		return nil, fmt.Errorf("fencing: table %q: a Verifier needs LockName, the lock whose holders may write a row", cfg.Name)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	t := &Table{cfg: cfg}
	var err error
	if t.name, err = cfg.Dialect.quote(cfg.Name); err != nil {
		return nil, err
	}
	if t.fence, err = cfg.Dialect.quote(cfg.FenceColumn); err != nil {
		return nil, err
	}
	own := []string{cfg.FenceColumn} // the columns the Table manages
	for _, c := range []struct {
		name   string
		quoted *string
	}{{cfg.DeletedColumn, &t.deleted}, {cfg.VersionColumn, &t.version}} {
		if c.name == "" {
			continue
		}
		if slices.ContainsFunc(own, sameColumn(c.name)) {
			return nil, fmt.Errorf("fencing: table %q: the fence, deleted and version columns must be three different columns, %q is two", cfg.Name, c.name)
		}
		own = append(own, c.name)
		if *c.quoted, err = cfg.Dialect.quote(c.name); err != nil {
			return nil, err
		}
	}
	for _, k := range cfg.Key {
		if slices.ContainsFunc(own, sameColumn(k)) {
			return nil, fmt.Errorf("fencing: table %q: the fence, deleted or version column %q cannot be a key column", cfg.Name, k)
		}
		q, err := cfg.Dialect.quote(k)
		if err != nil {
			return nil, err
		}
		t.key = append(t.key, q)
	}
	t.mode.Store(int32(cfg.Mode))
	return t, nil
}

// Name returns the table's name as configured.
func (t *Table) Name() string { return t.cfg.Name }

// Mode returns the current mode.
func (t *Table) Mode() Mode { return Mode(t.mode.Load()) }

// SetMode switches the mode for every later write, at once.
func (t *Table) SetMode(m Mode) { t.mode.Store(int32(m)) }

// Key holds the values of a composite key, in the order of TableConfig.Key.
type Key []any

// DB is satisfied by *sql.DB, *sql.Tx and *sql.Conn.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Runner runs statements for the guarded writes. SQL adapts database/sql;
// package fencingpgx adapts pgx.
type Runner interface {
	// Exec runs a statement and returns the number of rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryInt64 returns the one int64 column of at most one row (found=false for none).
	QueryInt64(ctx context.Context, query string, args ...any) (v int64, found bool, err error)
}

// SQL adapts a database/sql handle (*sql.DB, *sql.Tx, *sql.Conn) to Runner.
func SQL(db DB) Runner { return sqlRunner{db} }

type sqlRunner struct{ db DB }

func (r sqlRunner) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := r.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r sqlRunner) QueryInt64(ctx context.Context, query string, args ...any) (int64, bool, error) {
	var v int64
	err := r.db.QueryRowContext(ctx, query, args...).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

// Update writes set (column → whole new value) to the row with this key, in
// ONE statement that also checks and records the token:
//
//	UPDATE t SET col = …, fence = $token WHERE key = … AND fence <= $token
//
// It returns nil if the row was written, an error matching ErrStale (a
// *StaleError with both tokens) if a newer token has written the row, and one
// matching ErrNoRow if there is no such row (or it is a tombstone: see
// TableConfig.DeletedColumn; to create a row, Insert or Upsert). Equal
// tokens pass, so a holder may write many times. On ErrStale, stop: re-acquire and read fresh data.
// Write whole values, never deltas (see the package doc).
//
// db may be the caller's transaction, at any isolation level: the check is
// made against the newest committed fence, never the transaction's snapshot.
// A stale write there fails with ErrStale, or with the database's own
// serialization failure (Postgres under REPEATABLE READ or SERIALIZABLE,
// SQLITE_BUSY on SQLite); roll the transaction back either way.
//
// A table with a Verifier refuses plain tokens: use UpdateSigned.
func (t *Table) Update(ctx context.Context, db DB, token Token, key any, set map[string]any) error {
	return t.UpdateVia(ctx, sqlRunner{db}, token, key, set)
}

// UpdateVia is Update through any Runner (fencingpgx.Runner for pgx).
func (t *Table) UpdateVia(ctx context.Context, r Runner, token Token, key any, set map[string]any) error {
	return t.update(ctx, r, credential{token: token}, key, set, t.cfg.Limit)
}

// UpdateSigned is Update with a signed token (Lease.SignedToken), for a
// table with a Verifier: the write goes ahead only if the token's signature
// is valid and it was issued for the lock TableConfig.LockName names for the
// row; otherwise it fails with an error matching ErrBadSignature and changes
// nothing. With nothing to set it claims the row, like Claim. r is SQL(db)
// for database/sql, fencingpgx.Runner(db) for pgx.
func (t *Table) UpdateSigned(ctx context.Context, r Runner, signed string, key any, set map[string]any) error {
	return t.update(ctx, r, credential{signed: signed, isSigned: true}, key, set, t.cfg.Limit)
}

// credential is what a writer presents: a plain token, or a signed one.
type credential struct {
	token    Token
	signed   string
	isSigned bool
}

// tokenOf returns the token c stands for on the row with keys: a plain
// token as is, where the table takes plain tokens; a signed one once
// verified for the row's lock, with the key's text that lock was named
// from (which the row's stored key must match exactly).
func (t *Table) tokenOf(c credential, keys []any) (_ Token, exact []string, _ error) {
	switch v := t.cfg.Verifier; {
	case !c.isSigned && v == nil:
		return c.token, nil, nil
	case !c.isSigned:
		return 0, nil, &SignatureError{Resource: t.cfg.Name, Reason: "a plain token, and this table takes signed tokens only (TableConfig.Verifier): pass Lease.SignedToken to UpdateSigned"}
	case v == nil:
		return 0, nil, fmt.Errorf("fencing: table %s has no Verifier to check a signed token: set TableConfig.Verifier and LockName", t.cfg.Name)
	}
	exact, err := keyText(keys)
	if err != nil {
		return 0, nil, fmt.Errorf("fencing: table %s: a signed write needs key values of integer or string types (its lock is named from their text), got %w", t.cfg.Name, err)
	}
	token, err := t.cfg.Verifier.VerifyFor(c.signed, t.cfg.LockName(exact), t.cfg.Name)
	return token, exact, err
}

// keyText returns the text of key values of integer or string types, or
// an error naming the first of another type.
func keyText(keys []any) ([]string, error) {
	text := make([]string, len(keys))
	for i, k := range keys {
		switch k := k.(type) {
		case string:
			text[i] = k
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
			text[i] = fmt.Sprint(k)
		default:
			return nil, fmt.Errorf("%T", k)
		}
	}
	return text, nil
}

// describe fills in what cw says of the token c offered for the row with
// keys: tokenOf's token (and the key's text, for a signed token), or its
// error.
func (t *Table) describe(cw *CheckedWrite, c credential, keys []any, exact []string, token Token, err error) {
	if err != nil {
		cw.Token = 0
		return
	}
	cw.Token = token
	if exact == nil && t.cfg.LockName != nil {
		exact, _ = keyText(keys)
	}
	if exact != nil && t.cfg.LockName != nil {
		cw.Lock = t.cfg.LockName(exact)
	}
	if c.isSigned {
		if g, err := t.cfg.Verifier.Verify(c.signed); err == nil { // verified just now: from the cache
			cw.Lease = g.Lease
		}
	}
}

// maxBigint is the highest token a BIGINT fence column holds.
const maxBigint = 1<<63 - 1

// op is the kind of a write through a Table.
type op int

const (
	opUpdate op = iota // UPDATE a live row: Update, Claim, UpdateSigned
	opDelete           // UPDATE the row into a tombstone: Delete
	opInsert           // INSERT, or revive a tombstone: Insert
	opUpsert           // INSERT, or UPDATE the row, tombstone or not: Upsert
)

var opNames = [...]string{opUpdate: "update", opDelete: "delete", opInsert: "insert", opUpsert: "upsert"}

func (o op) String() string { return opNames[o] }

// inserts reports whether o's statement is an INSERT.
func (o op) inserts() bool { return o == opInsert || o == opUpsert }

// update is UpdateVia or UpdateSigned under limit.
func (t *Table) update(ctx context.Context, r Runner, c credential, key any, set map[string]any, limit Limit) error {
	return t.write(ctx, r, opUpdate, c, key, set, limit)
}

// write is every guarded write: o's one statement, checked and recorded
// by the token; on zero rows, a locking read of the row tells why. A
// WriteObserver is told of it.
func (t *Table) write(ctx context.Context, r Runner, o op, c credential, key any, set map[string]any, limit Limit) error {
	wo, ok := t.cfg.Observer.(WriteObserver)
	if !ok {
		return t.checkedWrite(ctx, r, o, c, key, set, limit, nil)
	}
	cw := CheckedWrite{Table: t.cfg.Name, Token: c.token}
	cw.Err = t.checkedWrite(ctx, r, o, c, key, set, limit, &cw)
	wo.Checked(ctx, cw)
	return cw.Err
}

// checkedWrite is write; it fills in cw, if not nil, for a WriteObserver.
func (t *Table) checkedWrite(ctx context.Context, r Runner, o op, c credential, key any, set map[string]any, limit Limit, cw *CheckedWrite) error {
	keys, cols, err := t.keysAndColumns(key, set)
	if err != nil {
		return err
	}
	if o == opDelete && t.deleted == "" {
		return fmt.Errorf("fencing: table %s: Delete needs TableConfig.DeletedColumn (a row removed outright could be created again by a stale holder's Insert or Upsert, under an older token)", t.cfg.Name)
	}
	mode := t.Mode()
	if cw != nil {
		cw.Mode = mode
	}
	if mode == Off {
		return t.plainWrite(ctx, r, o, keys, cols, set)
	}
	token, exact, err := t.tokenOf(c, keys)
	if cw != nil {
		t.describe(cw, c, keys, exact, token, err)
	}
	var bad *SignatureError
	if errors.As(err, &bad) {
		return t.refuse(ctx, r, o, mode, keys, cols, set, err)
	} else if err != nil {
		return err
	}
	if exact != nil {
		if err := t.checkKeyTypes(ctx, r); errors.As(err, &bad) {
			return t.refuse(ctx, r, o, mode, keys, cols, set, err)
		} else if err != nil {
			return err
		}
	}
	if limit.Max == 0 || limit.Max > maxBigint {
		limit.Max = maxBigint
	}
	if err := limit.Check(t.cfg.Name, 0, token); err != nil {
		return t.refuse(ctx, r, o, mode, keys, cols, set, err)
	}
	q := t.statement(o, &token, keys, exact, cols, set, limit.MaxJump)
	var (
		stored         Token
		deleted, found bool
	)
	for attempt := 0; ; attempt++ {
		n, err := r.Exec(ctx, q.sql.String(), q.args...)
		if err != nil {
			return fmt.Errorf("fencing: %s %s: %w", o, t.cfg.Name, err)
		}
		if n > 0 && !(t.cfg.Dialect == MySQL && n == 1 && o.inserts()) {
			return nil
		}
		if n == 1 {
			return t.newRow(ctx, r, o, keys)
		}
		// Nothing changed (or, above, maybe nothing): no row, a newer
		// token, a live row for Insert, a tombstone for Update. The fence
		// only grows, so reading it now (a locking read: the newest
		// committed value, also inside the caller's transaction) tells which.
		if stored, deleted, found, err = t.storedFence(ctx, r, keys); err != nil {
			return err
		}
		if !found && !o.inserts() {
			return fmt.Errorf("%w in %s with key %v", ErrNoRow, t.cfg.Name, keys)
		}
		if !found && t.cfg.Dialect == MySQL {
			return fmt.Errorf("fencing: %s %s: nothing written, and no row has key %v: a unique index other than the key holds one of its values (ON DUPLICATE KEY UPDATE fires on any unique index), or the row was removed meanwhile", o, t.cfg.Name, keys)
		}
		if found {
			if exact != nil {
				if err := t.checkExact(ctx, r, keys, exact); errors.As(err, &bad) {
					return t.refuse(ctx, r, o, mode, keys, cols, set, err)
				} else if err != nil {
					return err
				}
			}
			if stored > token {
				break
			}
			if err := limit.Check(t.cfg.Name, stored, token); err != nil {
				return t.refuse(ctx, r, o, mode, keys, cols, set, err)
			}
			if o == opUpdate && deleted {
				return fmt.Errorf("%w in %s with key %v (deleted: a tombstone)", ErrNoRow, t.cfg.Name, keys)
			}
			if t.cfg.Dialect == MySQL && stored == token && deleted == (o == opDelete) && o != opInsert {
				// MySQL counts changed rows, not matched ones (the driver does not
				// set CLIENT_FOUND_ROWS unless the DSN asks): this was an identical
				// rewrite. Only the newest committed fence may say so; a snapshot
				// read would say it for a row a newer holder has written since.
				return nil
			}
			if o == opInsert && !deleted {
				return fmt.Errorf("%w in %s with key %v (written with token %d; Update or Upsert it)", ErrExists, t.cfg.Name, keys, stored)
			}
		}
		if attempt == 2 {
			return fmt.Errorf("fencing: %s %s: the row with key %v kept changing under the write; retry", o, t.cfg.Name, keys)
		}
		// The row appeared, vanished or moved on between the two statements: write again.
	}
	stale := &StaleError{Resource: t.cfg.Name, Offered: token, Highest: stored}
	if cw != nil {
		cw.Stale = stale
	}
	if t.cfg.Observer != nil {
		t.cfg.Observer.Stale(t.cfg.Name, mode, token, stored)
	}
	if mode == Enforce {
		return stale
	}
	t.cfg.Logger.Warn("fencing (observe mode): letting through a write that enforce mode would refuse",
		"table", t.cfg.Name, "op", o.String(), "key", keys, "offered", token, "highest", stored)
	return t.plainWrite(ctx, r, o, keys, cols, set)
}

// refuse handles a token above the limit or a refused signature: Enforce
// returns err; Observe logs it and writes without recording the token, so
// the fence column is never raised past every real token.
func (t *Table) refuse(ctx context.Context, r Runner, o op, mode Mode, keys []any, cols []column, set map[string]any, err error) error {
	observeRefusal(t.cfg.Observer, t.cfg.Name, mode, err)
	if mode == Enforce {
		return err
	}
	t.cfg.Logger.Warn("fencing (observe mode): letting through a write that enforce mode would refuse, without recording its token",
		"table", t.cfg.Name, "op", o.String(), "key", keys, "error", err)
	return t.plainWrite(ctx, r, o, keys, cols, set)
}

// plainWrite writes without looking at the fence column.
func (t *Table) plainWrite(ctx context.Context, r Runner, o op, keys []any, cols []column, set map[string]any) error {
	if o == opUpdate && len(cols) == 0 {
		return nil
	}
	q := t.statement(o, nil, keys, nil, cols, set, 0)
	n, err := r.Exec(ctx, q.sql.String(), q.args...)
	if err != nil {
		return fmt.Errorf("fencing: %s %s: %w", o, t.cfg.Name, err)
	}
	switch {
	case n == 1 && o == opInsert && t.cfg.Dialect == MySQL:
		return t.newRow(ctx, r, o, keys)
	case n > 0 || o == opUpsert:
		return nil
	case o == opInsert:
		return fmt.Errorf("%w in %s with key %v (Update or Upsert it)", ErrExists, t.cfg.Name, keys)
	}
	// Zero rows: none, or (MySQL) an identical rewrite.
	if found, err := t.rowExists(ctx, r, keys, nil, o == opUpdate); err != nil {
		return err
	} else if !found {
		return fmt.Errorf("%w in %s with key %v", ErrNoRow, t.cfg.Name, keys)
	}
	return nil
}

// newRow returns nil if o's INSERT … ON DUPLICATE KEY UPDATE on MySQL,
// which counted 1 row, added the row with this key, and an error if that
// cannot be known. MySQL counts 1 for a new row, 2 for an updated one and
// 0 for one left alone, or 1 for that too if the DSN sets clientFoundRows:
// then, and only then, a statement that changes nothing counts the row it
// found.
func (t *Table) newRow(ctx context.Context, r Runner, o op, keys []any) error {
	if foundRows, err := t.countsFoundRows(ctx, r, keys); err != nil {
		return err
	} else if foundRows {
		return fmt.Errorf("fencing: %s %s: the MySQL connection counts the rows a statement finds, not the ones it changes (the DSN sets clientFoundRows), so a refused write looks like a new row: the row with key %v may or may not have been written; drop clientFoundRows", o, t.cfg.Name, keys)
	}
	return nil
}

// countsFoundRows reports whether r's connection counts the rows a
// statement found rather than the ones it changed (MySQL's
// CLIENT_FOUND_ROWS, the DSN's clientFoundRows), by an UPDATE that
// changes nothing on the row with this key, which must exist: it sets
// the first key column to itself (in Off mode the fence column may not
// exist yet).
func (t *Table) countsFoundRows(ctx context.Context, r Runner, keys []any) (bool, error) {
	q := &query{d: t.cfg.Dialect}
	q.text("UPDATE ", t.name, " SET ", t.key[0], " = ", t.key[0])
	t.where(q, keys)
	n, err := r.Exec(ctx, q.sql.String(), q.args...)
	if err != nil {
		return false, fmt.Errorf("fencing: read %s: %w", t.cfg.Name, err)
	}
	return n > 0, nil
}

// rowExists reports whether a row has this key (and, with exact, a stored
// key that reads exactly so; with live, is not a tombstone).
func (t *Table) rowExists(ctx context.Context, r Runner, keys []any, exact []string, live bool) (bool, error) {
	q := &query{d: t.cfg.Dialect}
	q.text("SELECT 1 FROM ", t.name)
	t.where(q, keys)
	t.whereExact(q, exact)
	if live && t.deleted != "" {
		q.text(" AND ", t.deleted, " = 0")
	}
	_, found, err := r.QueryInt64(ctx, q.sql.String(), q.args...)
	if err != nil {
		return false, fmt.Errorf("fencing: read %s: %w", t.cfg.Name, err)
	}
	return found, nil
}

// storedFence reads the row's fence, and whether it is a tombstone, with a
// locking read, so that inside the caller's transaction it sees the newest
// committed values, not the transaction's snapshot (see Dialect.lockRead).
func (t *Table) storedFence(ctx context.Context, r Runner, keys []any) (fence Token, deleted, found bool, err error) {
	q := &query{d: t.cfg.Dialect}
	if t.deleted == "" {
		q.text("SELECT ", t.fence)
	} else {
		// One column for both: a tombstone's fence f reads as -1-f (< 0).
		q.text("SELECT CASE WHEN ", t.deleted, " <> 0 THEN -1 - ", t.fence, " ELSE ", t.fence, " END")
	}
	q.text(" FROM ", t.name)
	t.where(q, keys)
	q.text(t.cfg.Dialect.lockRead)
	v, found, err := r.QueryInt64(ctx, q.sql.String(), q.args...)
	if err != nil {
		return 0, false, false, fmt.Errorf("fencing: read %s.%s: %w", t.cfg.Name, t.cfg.FenceColumn, err)
	}
	if v < 0 {
		return Token(-1 - v), true, found, nil
	}
	return Token(v), false, found, nil
}

// whereExact adds, for a signed write, that the row's stored key reads
// exactly as the text its lock was named from.
func (t *Table) whereExact(q *query, exact []string) {
	if exact == nil {
		return // a plain token
	}
	for i, k := range t.key {
		q.text(" AND ", t.cfg.Dialect.exactText(k), " = ").arg(exact[i])
	}
}

// checkKeyTypes makes sure, once, that the key columns are of types whose
// text is fixed (Dialect.exactKeyTypes): a signed write compares the stored
// key's text with the text its lock was named from, and a DATE's or a
// TIMESTAMP's would follow the session's settings, giving one row two lock
// names. It looks in the schema the session resolves first; on Postgres
// exactText also guards every row (a session with another search_path
// finds another table), on MySQL a Table must not be used across schemas
// (USE) with key columns of other types there.
func (t *Table) checkKeyTypes(ctx context.Context, r Runner) error {
	d := t.cfg.Dialect
	if t.keyTypesOK.Load() || d.exactKeyTypes == "" {
		return nil
	}
	schema, name := splitName(t.cfg.Name)
	for _, k := range t.cfg.Key {
		n, _, err := r.QueryInt64(ctx, d.columnQuery+d.exactKeyTypes, schema, name, k)
		if err != nil {
			return fmt.Errorf("fencing: look at %s.%s: %w", t.cfg.Name, k, err)
		}
		if n == 0 {
			return &SignatureError{Resource: t.cfg.Name, Reason: fmt.Sprintf(
				"signed writes need key columns of integer or character types (a lock is named from the key's text, and other types' text depends on the session), and %s is not (or does not exist)", k)}
		}
	}
	t.keyTypesOK.Store(true)
	return nil
}

// checkExact tells a row whose stored key reads otherwise than exact (so
// a signed write did not match it) from a stale write.
func (t *Table) checkExact(ctx context.Context, r Runner, keys []any, exact []string) error {
	found, err := t.rowExists(ctx, r, keys, exact, false)
	if err != nil {
		return err
	}
	if !found {
		return &SignatureError{Resource: t.cfg.Name, Reason: fmt.Sprintf(
			"the key %q is not the row's key as the database stores it (its lock is named from the key's text, so pass the key exactly as stored; key columns must be integers or character strings)", exact)}
	}
	return nil
}

func (t *Table) where(q *query, keys []any) {
	for i, k := range t.key {
		if i == 0 {
			q.text(" WHERE ")
		} else {
			q.text(" AND ")
		}
		q.text(k, " = ").arg(keys[i])
	}
}

func (t *Table) keyValues(key any) ([]any, error) {
	keys, ok := key.(Key)
	if !ok {
		keys = Key{key}
	}
	if len(keys) != len(t.key) {
		return nil, fmt.Errorf("fencing: table %s has %d key column(s), got %d value(s)", t.cfg.Name, len(t.key), len(keys))
	}
	if i := slices.Index(keys, nil); i >= 0 {
		// NULL equals no key; SQLite would even insert it, as a new row each time.
		return nil, fmt.Errorf("fencing: table %s: key column %s is nil (NULL: it selects no row)", t.cfg.Name, t.cfg.Key[i])
	}
	return keys, nil
}

type column struct{ name, quoted string }

// keysAndColumns checks a write's key (keyValues) and columns (columns).
func (t *Table) keysAndColumns(key any, set map[string]any) ([]any, []column, error) {
	keys, err := t.keyValues(key)
	if err != nil {
		return nil, nil, err
	}
	cols, err := t.columns(set)
	return keys, cols, err
}

// sameColumn reports whether a column name (not "") names column a.
// Names compare without regard to case: MySQL and SQLite match column
// names so, quoted or not ("FENCE" is the fence column there).
func sameColumn(a string) func(string) bool {
	return func(b string) bool { return b != "" && strings.EqualFold(a, b) }
}

// columns checks and orders set's columns (sorted, so statements are stable).
func (t *Table) columns(set map[string]any) ([]column, error) {
	var cols []column
	for _, name := range slices.Sorted(maps.Keys(set)) {
		is := sameColumn(name)
		if is(t.cfg.FenceColumn) || slices.ContainsFunc(t.cfg.Key, is) {
			return nil, fmt.Errorf("fencing: do not set %q yourself: the key selects the row and the token sets the fence", name)
		}
		if is(t.cfg.DeletedColumn) || is(t.cfg.VersionColumn) {
			return nil, fmt.Errorf("fencing: do not set %q yourself: Delete marks tombstones and every write adds one to the version", name)
		}
		q, err := t.cfg.Dialect.quote(name)
		if err != nil {
			return nil, err
		}
		cols = append(cols, column{name, q})
	}
	return cols, nil
}

// TxBeginner is satisfied by *sql.DB and *sql.Conn.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// InTx checks the token against the row with this key and records it, then
// runs fn in the same transaction, for writes that touch more than one row.
// The check locks the fence row until the transaction ends, so holders of
// this row are serialised: a newer holder waits, an older one gets ErrStale.
// InTx commits if fn returns nil and rolls back if it returns an error or
// panics; fn must not commit or roll back itself.
func (t *Table) InTx(ctx context.Context, db TxBeginner, token Token, key any, fn func(tx *sql.Tx) error) (err error) {
	return t.inTx(ctx, db, credential{token: token}, key, fn)
}

// InTxSigned is InTx with a signed token (see UpdateSigned).
func (t *Table) InTxSigned(ctx context.Context, db TxBeginner, signed string, key any, fn func(tx *sql.Tx) error) (err error) {
	return t.inTx(ctx, db, credential{signed: signed, isSigned: true}, key, fn)
}

func (t *Table) inTx(ctx context.Context, db TxBeginner, c credential, key any, fn func(tx *sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fencing: begin: %w", err)
	}
	return RunTx(tx.Commit, tx.Rollback, func() error {
		if err := t.update(ctx, sqlRunner{tx}, c, key, nil, t.cfg.Limit); err != nil {
			return err
		}
		return fn(tx)
	})
}

// Claim records token on the row (fence = token) if no newer token has
// written it, without writing anything else: Update with nothing to set.
// Inside a transaction it holds the row until the transaction ends.
func (t *Table) Claim(ctx context.Context, db DB, token Token, key any) error {
	return t.UpdateVia(ctx, sqlRunner{db}, token, key, nil)
}

// RunTx runs body, then commit if it returned nil, else rollback (also on
// panic, which it re-raises). Adapters (fencingpgx) use it for their InTx.
func RunTx(commit, rollback func() error, body func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			rollback()
			panic(p)
		}
	}()
	if err := body(); err != nil {
		if rerr := rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return errors.Join(err, fmt.Errorf("fencing: rollback: %w", rerr))
		}
		return err
	}
	if err := commit(); err != nil {
		return fmt.Errorf("fencing: commit: %w", err)
	}
	return nil
}

// EnsureColumn adds the fence column (BIGINT NOT NULL DEFAULT 0) if the table
// lacks it, and so the DeletedColumn and VersionColumn if configured. It is
// idempotent and safe to run at every start.
func (t *Table) EnsureColumn(ctx context.Context, db DB) error {
	return t.EnsureColumnVia(ctx, sqlRunner{db})
}

// EnsureColumnVia is EnsureColumn through any Runner.
func (t *Table) EnsureColumnVia(ctx context.Context, r Runner) error {
	for _, c := range [][2]string{{t.cfg.FenceColumn, t.fence}, {t.cfg.DeletedColumn, t.deleted}, {t.cfg.VersionColumn, t.version}} {
		if c[0] == "" {
			continue
		}
		if err := addColumn(ctx, r, t.cfg.Dialect, t.cfg.Name, t.name, c[0], c[1]); err != nil {
			return err
		}
	}
	return nil
}

// splitName splits a table's name into its schema ("" if unqualified)
// and its own name.
func splitName(table string) (schema, name string) {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[:i], table[i+1:]
	}
	return "", table
}

// addColumn adds column (BIGINT NOT NULL DEFAULT 0) to table if it lacks it;
// quotedTable and quotedColumn are their quoted forms.
func addColumn(ctx context.Context, r Runner, d *Dialect, table, quotedTable, column, quotedColumn string) error {
	schema, name := splitName(table)
	has := func() (bool, error) {
		n, _, err := r.QueryInt64(ctx, d.columnQuery, schema, name, column)
		return n > 0, err
	}
	ok, err := has()
	if err != nil {
		return fmt.Errorf("fencing: look for %s.%s: %w", table, column, err)
	}
	if ok {
		return nil
	}
	_, err = r.Exec(ctx, "ALTER TABLE "+quotedTable+" ADD COLUMN "+quotedColumn+" BIGINT NOT NULL DEFAULT 0")
	if err != nil {
		if ok, herr := has(); herr == nil && ok { // someone else added it meanwhile
			return nil
		}
		return fmt.Errorf("fencing: add %s.%s: %w", table, column, err)
	}
	return nil
}
