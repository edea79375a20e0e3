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
// A [Table] makes every write one statement that checks and records the
// token: Update (and Claim) of a row, Insert of a new one (ErrExists if it
// is there), Upsert (insert or guarded update, in one INSERT … ON
// CONFLICT), Delete (a tombstone, see the caveats). CompareAndSet needs no
// token at all: it writes if a version column still holds the version
// you read, else fails with [ErrConflict].
//
// No lock at all is often the right amount. For a short read-modify-write
// of rows in one database, CompareAndSet lets the database order the
// writers: no lease to lose, no row lock to wait on. A lease holder needs
// no row lock either to create, overwrite or delete a row: Insert, Upsert
// and Delete are one statement each, where SELECT … FOR UPDATE then INSERT
// or UPDATE (or InTx) holds a lock until commit. Take a lease, with its
// token, when the work is long, touches something outside that database,
// or must not be done twice: a conditional write only makes the losing
// writer fail at the end, after its work.
//
// # Caveats
//
//   - A stale write can still land before the newer holder's first write;
//     write whole values, never deltas, so the newer write replaces it.
//   - Never retry a refused write with the same token.
//   - A row removed by DELETE forgets its fence: a stale holder's Insert
//     or Upsert could create it again under an older token. Delete
//     therefore keeps the row as a tombstone (TableConfig.DeletedColumn);
//     your reads must skip tombstones, and purge old ones only once no
//     holder of an older token can be alive.
//   - On MySQL, Insert and Upsert need the DSN's clientFoundRows off (the
//     driver's default; with it they fail, as a refused write would look
//     like a new row), and a table whose only unique index is its key.
//     Update, Ledger and SQLStore work either way.
//   - One write with a token nobody issued (1<<62, say) would raise the fence
//     past every real token and lock the resource out for good. Set a
//     [Limit] (TableConfig.Limit, MiddlewareConfig.Limit): a token above it
//     is refused with an error matching [ErrTooHigh] and changes nothing.
//     A row poisoned before the limit was set needs its fence reset by hand.
//
// # Signed tokens
//
// A Limit bounds how far a made-up token can reach; a signed token rules
// it out. With each grant a fence server with a token key also returns a
// signed statement of it (Lease.SignedToken): cluster, lock name, token,
// lease number, issue time, key id, signed with Ed25519. Give a Table, the
// Middleware or a Ledger a [Verifier] with the cluster's public key(s) and
// a LockName rule, and it accepts only signed tokens issued for the lock of
// the row being written: a forged, altered or borrowed token (a real grant
// of another lock) is refused with an error matching [ErrBadSignature].
// Verification is offline: no call to the fence server.
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

// Errors of package fencing. Match them with errors.Is; the typed errors
// (*StaleError, *TooHighError) carry the tokens.
var (
	// ErrStale is matched by every refusal of a stale token: a newer holder
	// has written; stop, re-acquire, read fresh data.
	ErrStale = errors.New("fencing: stale token")
	// ErrTooHigh is matched by every refusal of a token above a Limit: no
	// lock grant can have issued it. Nothing was written or recorded.
	ErrTooHigh = errors.New("fencing: token above the limit")
	// ErrNoRow: the guarded write found no row with that key (or only a
	// tombstone, see TableConfig.DeletedColumn).
	ErrNoRow = errors.New("fencing: no such row")
	// ErrExists: Insert found a live row with that key, written with the
	// same token or an older one (a newer one gives ErrStale). Nothing was
	// written; Update or Upsert it if overwriting is what you mean.
	ErrExists = errors.New("fencing: row exists")
	// ErrConflict is matched by every refusal of a CompareAndSet (a
	// *ConflictError with both versions): the row's version moved on since
	// you read it. Nothing was written; read again, compute again, retry.
	ErrConflict = errors.New("fencing: version conflict")
)

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

// ConflictError reports a refused CompareAndSet: the row's version was
// Actual, not Expected. It matches ErrConflict.
type ConflictError struct {
	Resource string
	Key      any
	Expected int64
	Actual   int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("fencing: version conflict in %s with key %v: version %d, expected %d (another write came first; read again)", e.Resource, e.Key, e.Actual, e.Expected)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// TooHighError reports a token refused by a Limit: Offered is the writer's
// token, Ceiling the highest token the resource would have accepted. It
// matches ErrTooHigh.
type TooHighError struct {
	Resource string
	Offered  Token
	Ceiling  Token
}

func (e *TooHighError) Error() string {
	return fmt.Sprintf("fencing: token for %s above the limit: %d > %d (no lock grant issued it; refused so it cannot lock out every real holder)", e.Resource, e.Offered, e.Ceiling)
}

// Is makes errors.Is(err, ErrTooHigh) true.
func (e *TooHighError) Is(target error) bool { return target == ErrTooHigh }

// Limit bounds the tokens a resource accepts. Without one, a single write
// with a token no lock service issued — a bug, a typo, a forged header, say
// 1<<62 — raises the fence past every real token, and the resource refuses
// every real holder from then on. A token above the limit is refused with a
// *TooHighError and changes nothing. The zero Limit accepts every token.
//
// A Limit still applies to a signed token once its signature is verified.
type Limit struct {
	// Max is the highest token accepted at all; 0 means no maximum. fence's
	// counter grows by one per grant (of any lock), so a Max of 1<<48 lasts
	// 89 years at 100,000 grants a second; choose one well above what your
	// token source will reach in the data's lifetime.
	Max Token
	// MaxJump is how far above the highest token a resource has accepted a
	// token may be; 0 means any. Tokens count the grants of all locks, so
	// choose it above the number of grants that can happen between two
	// writes of one resource. A resource that has accepted no token yet
	// (fence 0) is bounded by Max alone.
	MaxJump Token
}

// Ceiling returns the highest token a resource whose highest accepted token
// is highest may accept.
func (l Limit) Ceiling(highest Token) Token {
	c := ^Token(0)
	if l.Max != 0 {
		c = l.Max
	}
	if l.MaxJump != 0 && highest != 0 && highest < c && c-highest > l.MaxJump {
		c = highest + l.MaxJump
	}
	return c
}

// Check returns nil if a resource whose highest accepted token is highest
// may accept token, else a *TooHighError. A TokenStore of your own calls it
// inside its atomic Advance.
func (l Limit) Check(resource string, highest, token Token) error {
	if c := l.Ceiling(highest); token > c {
		return &TooHighError{Resource: resource, Offered: token, Ceiling: c}
	}
	return nil
}
