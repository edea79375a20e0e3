package client

import (
	"errors"
	"fmt"
)

// Errors. Match them with errors.Is; the values returned wrap them with detail.
var (
	// ErrLocked: TryLock found the lock held (or in lock-delay). The error is a
	// *LockedError that says by whom.
	ErrLocked = errors.New("fence: lock is held")
	// ErrExpired: the lease can no longer be trusted: no renewal succeeded
	// before the local deadline (the process was paused, or the server was
	// slow or unreachable), or the server reported the lease ended (it expired,
	// or an admin revoked it). Stop the work; another holder may exist.
	ErrExpired = errors.New("fence: lease expired")
	// ErrLostContact: a kind of ErrExpired: renewals were failing to reach the
	// server until the deadline passed.
	ErrLostContact = errors.New("fence: lost contact with the server before the lease deadline")
	// ErrReleased: the holder released the lock.
	ErrReleased = errors.New("fence: lock released")
	// ErrClosed: the Client was closed, which revokes its leases.
	ErrClosed = errors.New("fence: client closed")
	// ErrIndeterminate: the call's context ended while the server might still
	// have acted on it. Lock, TryLock and Release settle such an outcome
	// themselves (they re-send the same request for a few seconds and give
	// back a grant nobody heard of); if they cannot, they give up the whole
	// session so the server ends it, and their error matches ErrIndeterminate
	// and ErrExpired. For other calls, retry with a new context.
	ErrIndeterminate = errors.New("fence: outcome unknown")
	// ErrRevoked: an admin force-released this lock (fence release --force):
	// another holder may have it now. Only that Lease ends; the Client's other
	// locks live on. A kind of ending like ErrExpired: stop the work.
	ErrRevoked = errors.New("fence: lock force-released by an admin")
	// ErrNotHeld: ForceRelease found the lock not held (or its grant ended
	// meanwhile); nothing was released.
	ErrNotHeld = errors.New("fence: lock not held")
	// ErrInvalid: the call was refused for a bad argument (by this client, or
	// by the server: gRPC code InvalidArgument); nothing was changed.
	ErrInvalid = errors.New("fence: invalid argument")
)

// LockedError is returned by TryLock when the lock is taken, by another
// process or by another caller of the same Client (Local). It matches ErrLocked.
type LockedError struct {
	Name        string
	HolderLease uint64 // public lease number of the holder (0 while in lock-delay)
	HolderOwner string
	Token       uint64 // the holder's token (or the last holder's, while delayed)
	Delayed     bool   // free, but in lock-delay after the last holder's lease expired
	Local       bool   // held by another caller of this Client (TryLock does not wait for it)
}

func (e *LockedError) Error() string {
	if e.Local {
		return fmt.Sprintf("fence: lock %q is held in this process by another caller of the same Client (lease #%d, token %d)", e.Name, e.HolderLease, e.Token)
	}
	if e.Delayed {
		return fmt.Sprintf("fence: lock %q is in lock-delay after its last holder's lease expired", e.Name)
	}
	return fmt.Sprintf("fence: lock %q is held by lease #%d (owner %q) with token %d", e.Name, e.HolderLease, e.HolderOwner, e.Token)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }
