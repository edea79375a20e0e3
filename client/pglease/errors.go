package pglease

import "errors"

// Errors. Match them with errors.Is; the values returned wrap them with detail.
var (
	// ErrLocked: TryLock found the lock held by a lease the database has not
	// seen expire (another holder's, or another Lease of this process: one
	// holder per name).
	ErrLocked = errors.New("pglease: lock is held")
	// ErrExpired: the lease can no longer be trusted: no renewal succeeded
	// before the local deadline (the process was paused, or the database
	// was slow or unreachable), or the database no longer held the lock for
	// this holder (ErrLost). Stop the work; another holder may exist, and
	// fenced writes with this lease's token are refused once it has written.
	ErrExpired = errors.New("pglease: lease expired")
	// ErrLost: a kind of ErrExpired: a renewal or Release found the lock's
	// row no longer held by this holder (the database judged it expired, or
	// another holder has it).
	ErrLost = errors.New("pglease: the database no longer holds the lock for this holder")
	// ErrReleased: the holder released the lock.
	ErrReleased = errors.New("pglease: lock released")
	// ErrInvalid: the call was refused for a bad argument (an empty or
	// malformed lock or table name, a TTL that is not a positive whole
	// number of microseconds, a safety margin as long as the TTL, a poll
	// interval that is not positive, a Locker given a *sql.Tx); nothing was
	// sent to the database.
	ErrInvalid = errors.New("pglease: invalid argument")
	// ErrSchema: EnsureSchema found the token sequence set up so that tokens
	// could repeat or go backwards (CYCLE, or CACHE above 1).
	ErrSchema = errors.New("pglease: unsafe token sequence")
)
