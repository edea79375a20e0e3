package dblock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/fencehq/fence/fencing"
)

// InSession runs fn holding session-scoped advisory locks on names, on one
// connection of db reserved for the call (pg_advisory_lock on Postgres,
// GET_LOCK on MySQL): LockSession, fn, Session.Unlock. fn may run
// statements and transactions of its own on conn and must not close it.
// If locking or unlocking fails (or fn panics), the connection is closed
// rather than returned to db's pool, so its locks end with it. If fn
// closes conn anyway, the connection is back in db's pool holding the
// locks: InSession then ends its server session through another of db's
// connections (pg_terminate_backend, KILL), which releases them, and
// returns an error matching sql.ErrConnDone (the next statement that
// pooled connection is given may fail).
//
// A lock taken through a pooler in transaction mode would be held by a
// server connection nobody owns: see LockSession and the package's caveats.
func InSession(ctx context.Context, db *sql.DB, o Options, names []string, fn func(conn *sql.Conn) error) error {
	if _, err := o.check(names, false); err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("dblock: connection: %w", err)
	}
	return withSession(ctx, fencing.SQL(conn), o, names, func(s *Session) error {
		err := fn(conn)
		if errors.Is(conn.Raw(func(any) error { return nil }), sql.ErrConnDone) {
			return errors.Join(err, fmt.Errorf("dblock: fn closed the session's connection (%w), which went back to the pool holding the locks; %s",
				sql.ErrConnDone, s.end(context.WithoutCancel(ctx), fencing.SQL(db))))
		}
		return err
	}, func(discard bool) {
		if discard {
			// Closes the server connection, which releases its locks.
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	})
}

// WithSession is InSession on a connection you reserved: LockSession on r,
// fn, Session.Unlock, then done, once. done(true) must close the
// connection, so that any locks on it end with it: locking or unlocking
// failed, or fn panicked. done(false) may return it to its pool.
// fencingpgx.LockInSession is built on it.
func WithSession(ctx context.Context, r fencing.Runner, o Options, names []string, fn func() error, done func(discard bool)) (err error) {
	return withSession(ctx, r, o, names, func(*Session) error { return fn() }, done)
}

// withSession is WithSession whose fn is given the Session.
func withSession(ctx context.Context, r fencing.Runner, o Options, names []string, fn func(s *Session) error, done func(discard bool)) (err error) {
	s, err := LockSession(ctx, r, o, names)
	if err != nil {
		done(!errors.Is(err, ErrBadInput)) // bad input: nothing was sent
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			done(true)
			panic(p)
		}
	}()
	err = fn(s)
	if uerr := s.Unlock(context.WithoutCancel(ctx)); uerr != nil {
		done(true)
		return errors.Join(err, uerr)
	}
	done(false)
	return err
}

// Session is a set of session-scoped advisory locks held by one database
// connection, from LockSession until Unlock or the connection's end. It is
// not safe for concurrent use.
type Session struct {
	r   fencing.Runner
	o   Options
	ks  []key
	pid int64 // the server process (Postgres) or connection (MySQL) that took the locks
}

// LockSession takes session-scoped advisory locks on names on the one
// connection r runs on (fencing.SQL of a *sql.Conn, fencingpgx.Runner of a
// *pgx.Conn; never a pool, nor a transaction), in ascending key order, each
// waiting up to o.Timeout (Postgres: lock_timeout, set for the session and
// RESET after; MySQL: GET_LOCK's timeout). Release them with Unlock. On an
// error some locks may be held: close the connection (InSession does).
//
// On Postgres each of its statements (set lock_timeout, each lock, reset
// lock_timeout) reports its server process, and all must be the same; if
// not (a pooler in transaction mode), LockSession ends the server
// processes that took locks (pg_terminate_backend, so the locks go with
// them) and fails with ErrPooled.
func LockSession(ctx context.Context, r fencing.Runner, o Options, names []string) (*Session, error) {
	o, err := o.check(names, false)
	if err != nil {
		return nil, err
	}
	s := &Session{r: r, o: o, ks: keys(o, names)}
	if o.Dialect == fencing.MySQL {
		id, err := lockMySQL(ctx, r, o, s.ks)
		if err != nil {
			return nil, err
		}
		s.pid = id
		return s, nil
	}
	// Every statement reports its server process: set, lock…, reset.
	set, _, err := r.QueryInt64(ctx, "SELECT pg_backend_pid() FROM set_config('lock_timeout', $1, false)", millis(o.Timeout))
	if err != nil {
		return nil, fmt.Errorf("dblock: SET lock_timeout: %w", Classify(err, o.Wait))
	}
	pids, err := takeAll(ctx, r, o, s.ks, "")
	// RESET, as a SELECT: back to the session's default.
	reset, _, rerr := r.QueryInt64(ctx, "SELECT pg_backend_pid() FROM pg_settings, set_config('lock_timeout', reset_val, false) WHERE name = 'lock_timeout'")
	if rerr != nil && err == nil {
		err = fmt.Errorf("dblock: RESET lock_timeout: %w", rerr)
	}
	if err != nil {
		return nil, err
	}
	s.pid = set
	for _, pid := range append(pids, reset) {
		if pid != s.pid {
			return nil, fmt.Errorf("%w: lock_timeout set in server process %d, locks taken in %v, reset in %d; %s", ErrPooled, set, pids, reset, strand(ctx, r, pids...))
		}
	}
	return s, nil
}

// strand ends the server processes pids, whose session locks a pooler
// left behind: they sit on server connections it hands to others, held
// until they close (PgBouncer: server_lifetime, an hour by default). At
// worst another client's transaction on one fails and rolls back.
func strand(ctx context.Context, r fencing.Runner, pids ...int64) string {
	pids = slices.Compact(slices.Sorted(slices.Values(pids)))
	var errs []error
	for _, pid := range pids {
		if ended, _, err := r.QueryInt64(ctx, "SELECT pg_terminate_backend($1)::int", pid); ended != 1 {
			errs = append(errs, fmt.Errorf("server process %d: %v", pid, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Sprintf("could not end the server processes holding them: %v", errors.Join(errs...))
	}
	return fmt.Sprintf("ended server processes %v to release them", pids)
}

// mysqlSeconds is GET_LOCK's timeout for o.
func mysqlSeconds(o Options) float64 {
	if o.Wait == NoWait {
		return 0
	}
	return o.Timeout.Seconds()
}

// lockMySQL takes ks with GET_LOCK, in order.
func lockMySQL(ctx context.Context, r fencing.Runner, o Options, ks []key) (id int64, err error) {
	for _, k := range ks {
		// CONNECTION_ID() (at least 1) for a lock taken, 0 for none, -1 for NULL.
		got, _, err := r.QueryInt64(ctx, "SELECT CASE COALESCE(GET_LOCK(?, ?), -1) WHEN 1 THEN CONNECTION_ID() WHEN 0 THEN 0 ELSE -1 END", k.mysqlName(), mysqlSeconds(o))
		switch {
		case err != nil:
			return 0, fmt.Errorf("dblock: GET_LOCK %s: %w", k, Classify(err, o.Wait))
		case got == 0 && o.Wait == NoWait:
			return 0, fmt.Errorf("dblock: GET_LOCK %s: %w", k, ErrNotAvailable)
		case got == 0:
			return 0, fmt.Errorf("dblock: GET_LOCK %s: %w after %v", k, ErrLockTimeout, o.Timeout)
		case got < 0:
			return 0, fmt.Errorf("dblock: GET_LOCK %s returned NULL (an error, such as the session being killed)", k)
		}
		id = got
	}
	return id, nil
}

// end ends the server session that took s's locks, through r (another
// connection), which releases them, and says what it did.
func (s *Session) end(ctx context.Context, r fencing.Runner) string {
	if s.o.Dialect != fencing.MySQL {
		return strand(ctx, r, s.pid)
	}
	if _, err := r.Exec(ctx, "KILL CONNECTION "+strconv.FormatInt(s.pid, 10)); err != nil {
		return fmt.Sprintf("could not end connection %d holding them: %v", s.pid, err)
	}
	return fmt.Sprintf("ended connection %d to release them", s.pid)
}

// Unlock releases the locks, in the reverse order. A lock this session
// does not hold fails with ErrPooled (on Postgres the server process that
// took the locks is then ended, to release them); any error means: close
// the connection.
func (s *Session) Unlock(ctx context.Context) error {
	var errs []error
	for i := len(s.ks) - 1; i >= 0; i-- {
		k := s.ks[i]
		var got int64
		var err error
		if s.o.Dialect == fencing.MySQL {
			got, _, err = s.r.QueryInt64(ctx, "SELECT COALESCE(RELEASE_LOCK(?), 0)", k.mysqlName())
		} else {
			a, args := k.args()
			got, _, err = s.r.QueryInt64(ctx, "SELECT pg_advisory_unlock"+a+"::int", args...)
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("dblock: unlock %s: %w", k, err))
		case got != 1:
			errs = append(errs, fmt.Errorf("dblock: unlock %s: %w: this session did not hold it", k, ErrPooled))
		}
	}
	if s.o.Dialect != fencing.MySQL && errors.Is(errors.Join(errs...), ErrPooled) {
		errs = append(errs, errors.New("dblock: "+strand(ctx, s.r, s.pid)))
	}
	return errors.Join(errs...)
}
