package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
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
	// meanwhile), or UnlockDetached found its lease holding no lock; nothing
	// was released.
	ErrNotHeld = errors.New("fence: lock not held")
	// ErrUnreachable: Dial reached no member. The error says why for each
	// (no such host, connection refused, no answer in time, TLS handshake
	// failed, not a fence gRPC port) and, if Dial's context ended, also
	// matches the context's error. A call's error matches it too when the
	// member does not serve the call at all (gRPC's Unimplemented: an HTTP
	// port such as fence's metrics port, or a fence older than the client).
	ErrUnreachable = errors.New("fence: cannot reach a fence server")
	// ErrInvalid: the call was refused for a bad argument (by this client, or
	// by the server: gRPC code InvalidArgument); nothing was changed.
	ErrInvalid = errors.New("fence: invalid argument")
	// ErrRanRecently: a lock taken WithOncePer had a successful run recorded
	// inside the window, so it was not granted (the job ran already). The
	// error is a *RanError that says when, by whom and with which token.
	ErrRanRecently = errors.New("fence: already ran inside the once-per window")
	// ErrCompacted: a Watch asked for events from an index the member no
	// longer keeps (or the watch fell that far behind): List the locks again
	// and watch from the list's Index + 1.
	ErrCompacted = errors.New("fence: watch index no longer kept")
	// ErrNoLeader: Leader found no leader of the election (nobody holds its
	// lock, or its new leader has not written its value yet).
	ErrNoLeader = errors.New("fence: election has no leader")
	// ErrDeposed: Proclaim was refused because the election has a newer
	// leader (a larger token wrote its value): this one no longer leads;
	// stop acting as leader. The error also matches fencing.ErrStale.
	ErrDeposed = errors.New("fence: a newer leader was elected")
	// ErrPermits: the lock exists with another permit count than the call
	// asked for (a Semaphore of another n, a Lock or RLock of a semaphore,
	// a Semaphore of a mutex); nothing was changed. The error is a
	// *PermitsError with both counts. Every holder of a name must ask for
	// the same count while the lock is held or waited for.
	ErrPermits = errors.New("fence: lock has another permit count")
)

// PermitsError is returned when a lock has another permit count than the
// call asked for. It matches ErrPermits.
type PermitsError struct {
	Name    string
	Permits int // the lock's count (1: a mutex or a read-write lock)
	Asked   int // the call's
}

func (e *PermitsError) Error() string {
	return fmt.Sprintf("fence: lock %q is %s, but this call asked for %s; every holder of a name must ask for the same count while it is held or waited for",
		e.Name, permitsText(e.Permits), permitsText(e.Asked))
}

func permitsText(n int) string {
	if n == 1 {
		return "a lock of one permit (a mutex or read-write lock)"
	}
	return fmt.Sprintf("a semaphore of %d permits", n)
}

// Is makes errors.Is(err, ErrPermits) true.
func (e *PermitsError) Is(target error) bool { return target == ErrPermits }

// permitsError returns the PermitsError st carries (a PermitsMismatch detail), or nil.
func permitsError(name string, st *status.Status) error {
	for _, d := range st.Details() {
		if p, ok := d.(*api.PermitsMismatch); ok {
			return &PermitsError{Name: name, Permits: int(p.Permits), Asked: int(p.Asked)}
		}
	}
	return nil
}

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

// RanError is returned by Lock, TryLock and Do with WithOncePer when a
// successful run of the lock finished inside the window. It matches
// ErrRanRecently.
type RanError struct {
	Name        string
	Token       uint64    // the fencing token of the run
	HolderLease uint64    // public lease number of the host that ran it
	HolderOwner string    // its owner label
	At          time.Time // when it finished, by the leader's wall clock: for people, the window is not measured by it (zero if no longer known)
	// Ago is how long ago it finished on the cluster's clock, which counts
	// no time while there is no leader: at most the real time that passed.
	Ago    time.Duration
	Window time.Duration // the window the run was granted under
}

func (e *RanError) Error() string {
	if e.At.IsZero() {
		return fmt.Sprintf("fence: %q already ran inside its once-per window (token %d)", e.Name, e.Token)
	}
	return fmt.Sprintf("fence: %q already ran inside its once-per window: ran at %s, by lease #%d (owner %q), token %d",
		e.Name, e.At.Local().Format(time.RFC3339), e.HolderLease, e.HolderOwner, e.Token) // wall clock for display only: "ran at …"; At decides nothing
}

// Is makes errors.Is(err, ErrRanRecently) true.
func (e *RanError) Is(target error) bool { return target == ErrRanRecently }

// ranError returns the RanError st carries (a RanRecently detail), or nil.
// grantEnded returns the token of the GrantEnded detail of st (a retried
// Acquire whose grant has ended since), or 0.
func grantEnded(st *status.Status) uint64 {
	for _, d := range st.Details() {
		if g, ok := d.(*api.GrantEnded); ok {
			return g.Token
		}
	}
	return 0
}

func ranError(name string, st *status.Status) error {
	for _, d := range st.Details() {
		if r, ok := d.(*api.RanRecently); ok {
			e := &RanError{Name: name, Token: r.Token, HolderLease: r.LeaseNumber, HolderOwner: r.Owner,
				Ago: r.Ago.AsDuration(), Window: r.Window.AsDuration()}
			if r.FinishedAt != nil {
				e.At = r.FinishedAt.AsTime()
			}
			return e
		}
	}
	return nil
}

// callError is a call's failure as the server (or gRPC) reported it, worded
// for people: the status message without gRPC's "rpc error: code = …
// desc = …" framing. status.Code and status.FromError still see the status.
type callError struct {
	st   *status.Status
	addr string // the member called
	kind error  // what it matches besides the status (ErrInvalid, the context's error), or nil
}

// refusal wraps err, a gRPC status error from a call to addr, as a callError
// that matches kind; other errors are returned as they are.
func refusal(err error, addr string, kind error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	return &callError{st: st, addr: addr, kind: kind}
}

func (e *callError) Error() string {
	msg := e.st.Message()
	switch e.st.Code() {
	case codes.InvalidArgument:
		// The server's own checks already say "invalid: …".
		return "invalid argument: " + strings.TrimPrefix(msg, "invalid: ")
	case codes.PermissionDenied:
		return "permission denied: " + msg
	case codes.Unauthenticated:
		return "not authenticated: " + msg
	case codes.Unimplemented:
		// An HTTP server (fence's metrics port) answers gRPC with 404, which
		// gRPC reports as Unimplemented; so does a gRPC server without the call.
		return e.addr + " does not serve this call: is it fence's gRPC port (--grpc-addr, default 7300) and not its metrics port, " +
			"and a fence at least as new as this client?"
	}
	if msg == "" {
		return e.st.Code().String()
	}
	return msg
}

// GRPCStatus is the status the server sent (for status.Code and status.FromError).
func (e *callError) GRPCStatus() *status.Status { return e.st }

func (e *callError) Unwrap() error { return e.kind }
