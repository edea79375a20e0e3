// Package fencing is the storage side of fence: it lets a resource refuse a
// write from a holder whose lease already ran out, by comparing the write's
// fencing token with the highest token the resource has accepted.
//
// # Basics
//
// A fencing token is a number that grows with every lock grant ([Token]).
// A guarded write succeeds iff its token is at least the highest accepted
// (so one holder may write many times); otherwise it fails with an error that
// matches [ErrStale], and the holder must stop: another holder has written
// since. Re-acquire and read fresh data before trying again.
//
// # Caveats
//
//   - A stale write can still land before the newer holder's first write;
//     write whole values, never deltas, so the newer write replaces it.
//   - Never retry a refused write with the same token.
//
// The package is a leaf: it imports nothing from fence's server side, so any
// service can use it with tokens from any source.
package fencing

import (
	"errors"
	"fmt"
)

// Token is a fencing token: it only grows, one step per lock grant.
type Token = uint64

// ErrStale is matched (errors.Is) by every refusal of a stale token.
var ErrStale = errors.New("fencing: stale token")

// StaleError reports a refused write: Offered is the writer's token, Highest
// the highest the resource had accepted. It matches ErrStale.
type StaleError struct {
	Resource string
	Offered  Token
	Highest  Token
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fencing: stale token for %s: %d < %d (a newer holder has written; stop)", e.Resource, e.Offered, e.Highest)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }
