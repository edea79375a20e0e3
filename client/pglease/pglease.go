package pglease

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/fencehq/fence/internal/hold"
)

// DB is what a Locker needs of a database handle: *sql.DB has it, on any
// Postgres driver for database/sql (pgx's stdlib, lib/pq). Give it the
// primary's handle, never a *sql.Tx (Lock and TryLock refuse one with
// ErrInvalid): a grant must commit on its own.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// statements are the SQL of one lease table. Every expiry is judged by the
// database's clock_timestamp() (the moment the row is looked at, not the
// transaction's start), never by a client's clock. $1 is the lock name, $2
// the holder's secret, $3 the TTL in microseconds.
type statements struct {
	table, seq string // quoted
	grant      string
	renew      string
	release    string
}

func newStatements(o *options) (*statements, error) {
	table, seq, err := o.relations()
	if err != nil {
		return nil, err
	}
	expiry := `clock_timestamp() + $3::bigint * interval '1 microsecond'`
	return &statements{
		table: table,
		seq:   seq,
		// One statement, so one transaction: the expiry check, the token and
		// the grant. A free name is inserted; a taken one is updated only if
		// the database sees its lease expired. The token of an update is
		// drawn in SET, after the row is locked and found expired, so a
		// later grant of this name always draws a larger one. (The VALUES
		// token is drawn first, every time: a failed attempt leaves a gap.
		// It is used only for the first grant of a name, as releasing keeps
		// the row.)
		grant: `INSERT INTO ` + table + ` AS l (name, holder, token, expires_at)
VALUES ($1, $2, nextval('` + seq + `'), ` + expiry + `)
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, token = nextval('` + seq + `'), expires_at = ` + expiry + `
WHERE l.expires_at <= clock_timestamp()
RETURNING token`,
		// Only the holder, and only while the database has not judged the
		// lease expired: a late renewal does not bring it back.
		renew: `UPDATE ` + table + ` SET expires_at = ` + expiry + `
WHERE name = $1 AND holder = $2 AND expires_at > clock_timestamp()`,
		// Only the holder. The row stays (free, expired since -infinity), so
		// every later grant of the name goes through the update above.
		release: `UPDATE ` + table + ` SET holder = '', expires_at = '-infinity' WHERE name = $1 AND holder = $2`,
	}, nil
}

// EnsureSchema creates the lease table and its token sequence if they do
// not exist (idempotent; concurrent callers wait for each other), and
// checks that the sequence can neither cycle nor hand out cached values
// out of order (CACHE 1): otherwise it returns an error matching ErrSchema.
// WithTable names the table; other options are ignored.
//
//	CREATE SEQUENCE fence_lease_token AS bigint MINVALUE 1 NO CYCLE CACHE 1;
//	CREATE TABLE fence_lease (
//		name       text PRIMARY KEY,
//		holder     text NOT NULL,         -- the holder's secret; '' when free
//		token      bigint NOT NULL,       -- the last grant's fencing token
//		expires_at timestamptz NOT NULL   -- by the database's clock
//	);
func EnsureSchema(ctx context.Context, db *sql.DB, opts ...Option) error {
	o := defaults()
	o.apply(opts)
	st, err := newStatements(&o)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("pglease: schema: %w", err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		`SELECT pg_advisory_xact_lock(hashtext('fence pglease schema'))`,
		`CREATE SEQUENCE IF NOT EXISTS ` + st.seq + ` AS bigint MINVALUE 1 NO CYCLE CACHE 1`,
		`CREATE TABLE IF NOT EXISTS ` + st.table + ` (
	name text PRIMARY KEY,
	holder text NOT NULL,
	token bigint NOT NULL,
	expires_at timestamptz NOT NULL)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("pglease: schema: %w", err)
		}
	}
	var cache int64
	var cycle bool
	if err := tx.QueryRowContext(ctx, `SELECT seqcache, seqcycle FROM pg_sequence WHERE seqrelid = '`+st.seq+`'::regclass`).Scan(&cache, &cycle); err != nil {
		return fmt.Errorf("pglease: schema: %w", err)
	}
	if cache != 1 || cycle {
		return fmt.Errorf("%w: %s has CACHE %d, CYCLE %v; want CACHE 1, NO CYCLE (cached values are handed out out of order across sessions; a cycle repeats tokens)", ErrSchema, st.seq, cache, cycle)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("pglease: schema: %w", err)
	}
	return nil
}

// Locker takes leases in one Postgres database. It is safe for concurrent
// use and holds no resources of its own: closing the DB is the caller's.
type Locker struct {
	db   DB
	opts options
}

// New returns a Locker on db; opts are the defaults for its locks.
func New(db DB, opts ...Option) *Locker {
	o := defaults()
	o.apply(opts)
	return &Locker{db: db, opts: o}
}

// TryLock takes the lock if it is free or its lease has expired by the
// database's clock, and returns at once otherwise, with an error matching
// ErrLocked. If the database fails to answer, it returns that error, after
// freeing the lock if the grant did happen (best effort; else it expires
// within the TTL). A serialization failure or deadlock (SQLSTATE 40001,
// 40P01; only under REPEATABLE READ or SERIALIZABLE) granted nothing, and
// TryLock, Lock and Release try again after it.
func (k *Locker) TryLock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return k.acquire(ctx, name, false, opts)
}

// Lock waits until the lock is free and takes it, or until ctx ends. It
// polls (there is no queue), so it is not fair: see WithPoll. An error from
// the database ends the wait, as in TryLock (but for a serialization
// failure or deadlock: see TryLock).
func (k *Locker) Lock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return k.acquire(ctx, name, true, opts)
}

func (k *Locker) acquire(ctx context.Context, name string, wait bool, opts []Option) (*Lease, error) {
	o := k.opts
	o.apply(opts)
	margin, err := o.check(name)
	if err != nil {
		return nil, err
	}
	if _, ok := k.db.(*sql.Tx); ok {
		return nil, fmt.Errorf("%w: the Locker was given a *sql.Tx: a grant, its renewals and its release must each commit on their own; give it the *sql.DB", ErrInvalid)
	}
	st, err := newStatements(&o)
	if err != nil {
		return nil, err
	}
	holder := newHolder()
	backoff := hold.NewBackoff(o.pollMax)
	for {
		sent := o.clock.Now()
		var token int64
		err := k.db.QueryRowContext(ctx, st.grant, name, holder, o.ttl.Microseconds()).Scan(&token)
		switch {
		case err == nil:
			return newLease(k.db, st, o, name, holder, uint64(token), margin, sent), nil
		case errors.Is(err, sql.ErrNoRows): // held, not expired
			if !wait {
				return nil, fmt.Errorf("%w: %q", ErrLocked, name)
			}
		case retryable(err) && ctx.Err() == nil: // rolled back, granted nothing: again
		default:
			// The grant may have happened (a lost answer): take back what
			// is ours, if it is.
			k.giveBack(st, name, holder)
			return nil, fmt.Errorf("pglease: lock %q: %w", name, err)
		}
		if err := backoff.Wait(ctx); err != nil {
			return nil, fmt.Errorf("pglease: lock %q: %w", name, err)
		}
	}
}

// retryable reports a serialization failure or a deadlock: the statement
// was rolled back and granted nothing.
func retryable(err error) bool {
	var e interface{ SQLState() string } // pgx's *pgconn.PgError, lib/pq's *pq.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.SQLState() == "40001" || e.SQLState() == "40P01"
}

// giveBack frees name if holder still holds it, best effort: if it cannot,
// the lease expires within its TTL.
func (k *Locker) giveBack(st *statements, name, holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	k.db.ExecContext(ctx, st.release, name, holder)
}

// Do runs fn once while holding the lock: it waits for the lock (Lock),
// calls fn with a context that is cancelled the moment the lease can no
// longer be trusted (context.Cause says why) and with the grant's fencing
// token, and releases the lock afterwards. Pass the token to every write
// (fencing.Table): fn may still run on for a while after another holder
// took the lock, and only the storage can refuse its writes then. If the
// lease ended while fn ran and fn failed, Do's error wraps both the lease's
// reason (errors.Is(err, ErrExpired)) and fn's error. If fn panics, Do
// releases the lock and panics on.
func (k *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context, token uint64) error, opts ...Option) error {
	l, err := k.Lock(ctx, name, opts...)
	if err != nil {
		return err
	}
	return hold.Do(ctx, l, fmt.Sprintf("pglease: %q", name), func(ctx context.Context) error { return fn(ctx, l.Token()) })
}

// newHolder returns a holder's secret: 128 random bits.
func newHolder() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("pglease: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// keep starts the holder's side of a lease: renewals, the deadline and the
// release, each statement checking the holder's secret.
func keep(db DB, st *statements, o options, name, holder string, margin time.Duration, sent time.Time) *hold.Keeper {
	exec := func(ctx context.Context, query string, args ...any) (bool, error) {
		res, err := db.ExecContext(ctx, query, args...)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n == 1, err
	}
	return hold.Start(hold.KeeperConfig{
		Clock: o.clock, TTL: o.ttl, Margin: margin, Sent: sent,
		Renew: func(ctx context.Context) (bool, error) {
			return exec(ctx, st.renew, name, holder, o.ttl.Microseconds())
		},
		Release: func(ctx context.Context) (bool, error) {
			backoff := hold.NewBackoff(100 * time.Millisecond)
			for {
				ok, err := exec(ctx, st.release, name, holder)
				if !retryable(err) || backoff.Wait(ctx) != nil {
					return ok, err
				}
			}
		},
		Lost: func(at string) error {
			return fmt.Errorf("%w: %w: %q, found on %s (the database judged the lease expired, or another holder has it)", ErrExpired, ErrLost, name, at)
		},
		Unanswered: func(err error) error {
			return fmt.Errorf("%w: release of %q failed (%v); the lease is no longer renewed and expires within the TTL (%v)", ErrExpired, name, err, o.ttl)
		},
		Expired: func(failing error) error {
			if failing != nil {
				return fmt.Errorf("%w: no renewal of %q succeeded within the TTL (%v); last renewal error: %v", ErrExpired, name, o.ttl, failing)
			}
			return fmt.Errorf("%w: no renewal of %q succeeded within the TTL (%v)", ErrExpired, name, o.ttl)
		},
		Released: ErrReleased,
		What:     fmt.Sprintf("pglease: %q", name),
	})
}
