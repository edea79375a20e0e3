package dblock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencehq/fence/fencing"
)

// Errors of package dblock. Match them with errors.Is; the driver's own
// error is wrapped alongside.
var (
	// ErrLockTimeout: the wait for a lock reached Options.Timeout (Postgres
	// 55P03 lock_not_available after lock_timeout; MySQL's GET_LOCK returned
	// 0, or a row lock waited innodb_lock_wait_timeout, error 1205).
	// Nothing is held: the transaction was rolled back, or the session's
	// locks released.
	ErrLockTimeout = errors.New("dblock: timed out waiting for a lock")
	// ErrNotAvailable: with NoWait the lock was taken by someone else
	// (pg_try_advisory_xact_lock false, FOR UPDATE NOWAIT's 55P03, MySQL
	// 3572). Nothing is held.
	ErrNotAvailable = errors.New("dblock: lock taken by someone else")
	// ErrDeadlock: the database found a cycle of waiters and failed this
	// one to break it (Postgres 40P01 deadlock_detected, MySQL 1213 or
	// 3058). Locks taken through one call never cause one; locks taken in
	// another order, outside it, can.
	ErrDeadlock = errors.New("dblock: deadlock detected")
	// ErrIdleTimeout: the holder sat idle in its transaction longer than
	// Options.IdleTimeout and Postgres ended its session (25P03); its locks
	// are gone, and so is everything fn wrote.
	ErrIdleTimeout = errors.New("dblock: holder idle too long in its transaction")
	// ErrPooled: a session lock's server session changed under the
	// connection (PgBouncer in transaction pooling mode?), or unlocking found
	// the lock not held by this session. InSession has then ended the
	// server process that took the locks, to release them. Session locks
	// need a session of their own; see the package's caveats.
	ErrPooled = errors.New("dblock: session lock without a session of its own (transaction pooling?)")
	// ErrBadInput: a call's names or options were refused before anything
	// was sent or taken.
	ErrBadInput = errors.New("dblock: bad input")
)

// Defaults for Options.
const (
	// DefaultTimeout is Options.Timeout's default: a waiter gives up after
	// 2s on each lock.
	DefaultTimeout = 2 * time.Second
	// DefaultIdleTimeout is Options.IdleTimeout's default: a holder idle
	// in its transaction for 10s loses its session and its locks.
	DefaultIdleTimeout = 10 * time.Second
	// MaxNames is the most names one call may lock (Postgres shares room
	// for max_locks_per_transaction, 64 by default, per connection).
	MaxNames = 64
)

// Wait is what a lock does when someone else holds it.
type Wait int

// The ways to wait.
const (
	// Block waits up to Options.Timeout, then fails with ErrLockTimeout.
	Block Wait = iota
	// NoWait fails at once with ErrNotAvailable.
	NoWait
	// SkipLocked (LockRow only) treats a locked row as no row.
	SkipLocked
)

// String names the wait: block, nowait or skip-locked.
func (w Wait) String() string {
	switch w {
	case Block:
		return "block"
	case NoWait:
		return "nowait"
	case SkipLocked:
		return "skip-locked"
	}
	return "wait(" + strconv.Itoa(int(w)) + ")"
}

// Options bound a lock's wait and hold. The zero value is Postgres with the
// defaults.
type Options struct {
	// Dialect is fencing.Postgres (nil means it) or fencing.MySQL.
	Dialect *fencing.Dialect
	// Timeout is how long to wait for each lock (Postgres lock_timeout:
	// SET LOCAL in a transaction, set and reset around a session's locks;
	// GET_LOCK's timeout); 0 means DefaultTimeout, and a negative value is
	// refused. Rounded up to a millisecond (Postgres) or passed as
	// fractional seconds (MySQL).
	Timeout time.Duration
	// IdleTimeout is how long the holder may sit idle inside its
	// transaction (Postgres idle_in_transaction_session_timeout, SET
	// LOCAL): InTx and LockRow. 0 means DefaultIdleTimeout; negative is
	// refused. Session locks are not in a transaction: it does not apply.
	IdleTimeout time.Duration
	// Wait: Block (the zero value) or NoWait; LockRow also SkipLocked.
	Wait Wait
	// Namespace, if not 0, selects the two-int key form (Namespace, a
	// 32-bit hash of the name): see Key2. Postgres only.
	Namespace int32
}

// check fills in o's defaults and refuses bad options, and (unless rows:
// LockRow takes no names) bad names.
func (o Options) check(names []string, rows bool) (Options, error) {
	if o.Dialect == nil {
		o.Dialect = fencing.Postgres
	}
	if o.Dialect != fencing.Postgres && o.Dialect != fencing.MySQL {
		return o, fmt.Errorf("%w: dialect %v: use fencing.Postgres or fencing.MySQL", ErrBadInput, o.Dialect)
	}
	if o.Timeout < 0 || o.IdleTimeout < 0 {
		return o, fmt.Errorf("%w: negative timeout (Timeout %v, IdleTimeout %v)", ErrBadInput, o.Timeout, o.IdleTimeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Wait < Block || o.Wait > SkipLocked || o.Wait == SkipLocked && !rows {
		return o, fmt.Errorf("%w: Wait %v: advisory locks block or NoWait", ErrBadInput, o.Wait)
	}
	if o.Namespace != 0 && o.Dialect != fencing.Postgres {
		return o, fmt.Errorf("%w: Namespace (the two-int key form) is Postgres only", ErrBadInput)
	}
	if rows {
		return o, nil
	}
	if len(names) == 0 {
		return o, fmt.Errorf("%w: no names to lock", ErrBadInput)
	}
	if len(names) > MaxNames {
		return o, fmt.Errorf("%w: %d names, at most %d in one call", ErrBadInput, len(names), MaxNames)
	}
	for _, n := range names {
		if n == "" {
			return o, fmt.Errorf("%w: empty lock name", ErrBadInput)
		}
	}
	return o, nil
}

// millis is d as Postgres's setting text, rounded up: 0 would mean "no
// limit", so even 1ns becomes 1ms.
func millis(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10) + "ms"
}

// sum is the hash both key forms take their bytes from.
func sum(name string) [sha256.Size]byte { return sha256.Sum256([]byte("fence/dblock\x00" + name)) }

// Key is name's 64-bit advisory key: the first 8 bytes of
// SHA-256("fence/dblock\x00" + name), big-endian, as a signed integer.
func Key(name string) int64 {
	s := sum(name)
	return int64(binary.BigEndian.Uint64(s[:8]))
}

// Key2 is name's two-int advisory key in namespace: (namespace, the first 4
// bytes of the hash Key uses, as a signed integer).
func Key2(namespace int32, name string) (int32, int32) {
	s := sum(name)
	return namespace, int32(binary.BigEndian.Uint32(s[:4]))
}

// key is one advisory key: a 64-bit one (ns == 0, two == false) or (ns, h).
type key struct {
	two   bool
	ns    int32
	k     int64 // the 64-bit key, or h
	names []string
}

// keys maps names to keys, in ascending order, collisions merged.
func keys(o Options, names []string) []key {
	ks := make([]key, 0, len(names))
	for _, n := range names {
		k := key{k: Key(n), names: []string{n}}
		if o.Namespace != 0 {
			ns, h := Key2(o.Namespace, n)
			k = key{two: true, ns: ns, k: int64(h), names: k.names}
		}
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b key) int {
		if a.ns != b.ns {
			return int(a.ns) - int(b.ns)
		}
		switch {
		case a.k < b.k:
			return -1
		case a.k > b.k:
			return 1
		}
		return 0
	})
	out := ks[:0]
	for _, k := range ks {
		if len(out) > 0 && out[len(out)-1].k == k.k && out[len(out)-1].ns == k.ns {
			last := &out[len(out)-1]
			if !slices.Contains(last.names, k.names[0]) {
				last.names = append(last.names, k.names[0])
			}
			continue
		}
		out = append(out, k)
	}
	return out
}

// String names the key by its name(s), for errors.
func (k key) String() string { return strconv.Quote(strings.Join(k.names, `" = "`)) }

// args are the key's arguments, and the SQL that takes them, to a
// pg_advisory function: "($1)" or "($1, $2)".
func (k key) args() (string, []any) {
	if k.two {
		return "($1::int4, $2::int4)", []any{k.ns, int32(k.k)}
	}
	return "($1::int8)", []any{k.k}
}

// mysqlName is k's GET_LOCK name.
func (k key) mysqlName() string { return fmt.Sprintf("dblock_%016x", uint64(k.k)) }

// setLocal sets the timeouts for the rest of the transaction r is in.
func setLocal(ctx context.Context, r fencing.Runner, o Options, idle bool) error {
	if _, err := r.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", millis(o.Timeout)); err != nil {
		return fmt.Errorf("dblock: SET LOCAL lock_timeout: %w", err)
	}
	if idle {
		if _, err := r.Exec(ctx, "SELECT set_config('idle_in_transaction_session_timeout', $1, true)", millis(o.IdleTimeout)); err != nil {
			return fmt.Errorf("dblock: SET LOCAL idle_in_transaction_session_timeout: %w", err)
		}
	}
	return nil
}

// LockTx takes transaction-scoped advisory locks on names in the Postgres
// transaction r runs in, in ascending key order, after setting lock_timeout
// and idle_in_transaction_session_timeout for the rest of that transaction
// (SET LOCAL). InTx, and fencingpgx.LockInTx, call it; call it yourself on a
// transaction you manage (fencing.SQL(tx) adapts a *sql.Tx). On an error
// roll the transaction back: some locks may be held.
func LockTx(ctx context.Context, r fencing.Runner, o Options, names []string) error {
	o, err := o.check(names, false)
	if err != nil {
		return err
	}
	if o.Dialect != fencing.Postgres {
		return fmt.Errorf("%w: %v has no transaction-scoped advisory lock: use InSession", ErrBadInput, o.Dialect)
	}
	if err := setLocal(ctx, r, o, true); err != nil {
		return Classify(err, o.Wait)
	}
	_, err = takeAll(ctx, r, o, keys(o, names), "xact_")
	return err
}

// takeAll takes Postgres advisory locks on ks, in order: scope "xact_" for
// transaction-scoped ones, "" for session-scoped ones. It returns the
// server process that took each (pg_backend_pid).
func takeAll(ctx context.Context, r fencing.Runner, o Options, ks []key, scope string) ([]int64, error) {
	pids := make([]int64, 0, len(ks))
	for _, k := range ks {
		a, args := k.args()
		q := "SELECT pg_backend_pid() FROM pg_advisory_" + scope + "lock" + a
		if o.Wait == NoWait {
			q = "SELECT CASE WHEN pg_try_advisory_" + scope + "lock" + a + " THEN pg_backend_pid() ELSE 0 END"
		}
		pid, _, err := r.QueryInt64(ctx, q, args...)
		if err != nil {
			return pids, fmt.Errorf("dblock: lock %s: %w", k, Classify(err, o.Wait))
		}
		if pid == 0 {
			return pids, fmt.Errorf("dblock: lock %s: %w", k, ErrNotAvailable)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// InTx runs fn in a transaction of db holding transaction-scoped advisory
// locks on names (Postgres): see the package doc. It commits if fn returns
// nil and rolls back otherwise (or if fn panics); fn must not commit or roll
// back tx itself. Bad input (no names, an empty name, more than MaxNames,
// a negative timeout) is refused with ErrBadInput before a transaction
// begins.
func InTx(ctx context.Context, db *sql.DB, o Options, names []string, fn func(tx *sql.Tx) error) error {
	if _, err := o.check(names, false); err != nil {
		return err
	}
	if o.Dialect != nil && o.Dialect != fencing.Postgres {
		return fmt.Errorf("%w: %v has no transaction-scoped advisory lock: use InSession", ErrBadInput, o.Dialect)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("dblock: begin: %w", err)
	}
	return runTx(tx, func() error {
		if err := LockTx(ctx, fencing.SQL(tx), o, names); err != nil {
			return err
		}
		return fn(tx)
	})
}

// runTx runs body in tx: commit on nil, roll back otherwise. Errors are
// classified where their code means one thing (an idle timeout, 25P03, may
// show in fn's statements or the commit); a 55P03 from fn's own statements
// is left as it is: only fn knows whether it used NOWAIT.
func runTx(tx *sql.Tx, body func() error) error {
	err := fencing.RunTx(tx.Commit, func() error {
		if err := tx.Rollback(); err != nil && !errors.Is(err, driver.ErrBadConn) {
			return err
		}
		return nil
	}, body)
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) && pg.SQLState() == "55P03" {
		return err
	}
	return Classify(err, Block)
}

// Classify returns err wrapped with the package's error for it, if it is a
// database's lock failure (w is the Wait the statement used: under NoWait,
// Postgres's 55P03 means ErrNotAvailable, else ErrLockTimeout); otherwise,
// or if err already matches one, err itself. Postgres errors are recognised
// by their SQLSTATE (any driver whose error has a SQLState() string method:
// pgx, lib/pq), MySQL's by their number (go-sql-driver/mysql's MySQLError).
func Classify(err error, w Wait) error {
	if err == nil {
		return nil
	}
	for _, e := range []error{ErrLockTimeout, ErrNotAvailable, ErrDeadlock, ErrIdleTimeout, ErrPooled, ErrBadInput} {
		if errors.Is(err, e) {
			return err
		}
	}
	var typed error
	var pg interface{ SQLState() string }
	switch {
	case errors.As(err, &pg):
		switch pg.SQLState() {
		case "55P03":
			typed = ErrLockTimeout
			if w == NoWait {
				typed = ErrNotAvailable
			}
		case "40P01":
			typed = ErrDeadlock
		case "25P03":
			typed = ErrIdleTimeout
		}
	default:
		n, _ := mysqlNumber(err)
		switch n {
		case 1205: // ER_LOCK_WAIT_TIMEOUT (MariaDB's NOWAIT too)
			typed = ErrLockTimeout
			if w == NoWait {
				typed = ErrNotAvailable
			}
		case 3572: // ER_LOCK_NOWAIT
			typed = ErrNotAvailable
		case 1213, 3058: // ER_LOCK_DEADLOCK, ER_USER_LOCK_DEADLOCK
			typed = ErrDeadlock
		}
	}
	if typed == nil {
		return err
	}
	return fmt.Errorf("%w: %w", typed, err)
}

// mysqlPkg is go-sql-driver/mysql, whose *MySQLError mysqlNumber reads.
const mysqlPkg = "github.com/go-sql-driver/mysql"

// mysqlNumber is the Number of the first *mysql.MySQLError in err's chain.
// It looks by reflection so that dblock (and fencingpgx, which imports it)
// need not import, and register, the MySQL driver.
func mysqlNumber(err error) (uint16, bool) {
	if err == nil {
		return 0, false
	}
	if v := reflect.ValueOf(err); v.Kind() == reflect.Pointer && !v.IsNil() {
		if t := v.Type().Elem(); t.PkgPath() == mysqlPkg && t.Name() == "MySQLError" {
			if f := v.Elem().FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
				return uint16(f.Uint()), true
			}
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return mysqlNumber(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if n, ok := mysqlNumber(e); ok {
				return n, ok
			}
		}
	}
	return 0, false
}
