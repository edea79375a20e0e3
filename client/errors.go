package client

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	// ErrCompacted: a Watch asked for events from an index the member no
	// longer keeps (or the watch fell that far behind): List the locks again
	// and watch from the list's Index + 1.
	ErrCompacted = errors.New("fence: watch index no longer kept")
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
