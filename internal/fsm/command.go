package fsm

import (
	"encoding/hex"
	"fmt"
	"time"
)

// LeaseID is the 128-bit secret that names a lease. The server draws it from
// crypto/rand and puts it into the CreateLease command, so every replica
// stores the same id.
type LeaseID [16]byte

// String returns a short, non-secret prefix for logs.
func (id LeaseID) String() string { return hex.EncodeToString(id[:3]) + "…" }

// IsZero reports whether id is unset.
func (id LeaseID) IsZero() bool { return id == LeaseID{} }

// RequestID identifies one client call across retries: 16 random bytes the
// client picks once per call and sends again on every retry. Every command a
// client causes carries one (Validate refuses a zero id); the commands the
// leader proposes on its own (Renew, Expire, CancelWait, GrantNext, Tick,
// SetNode) carry none.
type RequestID [16]byte

// IsZero reports whether id is unset.
func (id RequestID) IsZero() bool { return id == RequestID{} }

// Kind says which command a Command is.
type Kind uint8

// The commands. Values are part of the log format: never renumber.
const (
	// KindCreateLease starts a lease. Fields: RequestID, Lease, TTL, Owner,
	// Identity.
	KindCreateLease Kind = 1
	// KindRenew renews a lease. Fields: Lease.
	KindRenew Kind = 2
	// KindRevoke ends a lease and releases its locks with no lock-delay. Fields: RequestID, Lease.
	KindRevoke Kind = 3
	// KindExpire ends a lease whose deadline passed on the leader. Fields: Lease,
	// Renewals (the renewal count the leader judged; a later renewal makes this a no-op).
	KindExpire Kind = 4
	// KindAcquire takes a lock or joins its queue. Fields: RequestID, Lease,
	// Seq, Ack, Open, Name, Wait, LockDelay.
	KindAcquire Kind = 5
	// KindRelease gives up a held lock. Fields: RequestID, Lease, Seq, Ack, Open, Name.
	KindRelease Kind = 6
	// KindCancelWait leaves a lock's queue (the waiting call ended). Fields:
	// Lease, Name, Seq (of the Acquire that waits: a late CancelWait cannot
	// end a later wait of the same lease).
	KindCancelWait Kind = 7
	// KindGrantNext ends a lock's lock-delay and grants it to the next waiter.
	// Fields: Name, Token (the token of the grant whose expiry began the
	// delay: a late or retried GrantNext cannot end a later delay).
	KindGrantNext Kind = 8
	// KindPut writes the fenced key-value resource. Fields: Name (the key), Value, Token.
	KindPut Kind = 9
	// KindTick advances the logical clock by Elapsed, measured on the leader's monotonic clock.
	KindTick Kind = 10
	// KindSetNode records a node's client (gRPC) address: Name (node id), Addr.
	// A leader proposes it for itself on takeover, so followers can point
	// clients at it.
	KindSetNode Kind = 11
	// KindForceRelease (admin) ends one grant: the lock Name if its current
	// grant has Token, handed at once to the next waiter. The holder's lease
	// and its other locks live on. Fields: RequestID, Name, Token.
	KindForceRelease Kind = 12
)

var kindNames = [...]string{
	KindCreateLease: "create-lease", KindRenew: "renew", KindRevoke: "revoke",
	KindExpire: "expire", KindAcquire: "acquire", KindRelease: "release",
	KindCancelWait: "cancel-wait", KindGrantNext: "grant-next", KindPut: "put",
	KindTick: "tick", KindSetNode: "set-node", KindForceRelease: "force-release",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Command is one state change. Only the fields its Kind names are encoded;
// the others must be zero.
type Command struct {
	Kind      Kind
	RequestID RequestID
	Lease     LeaseID
	// Seq numbers a client's calls within one lease (Acquire, Release), from
	// 1, a new number per call and the same on its retries; CancelWait names
	// the waiting Acquire by it.
	Seq uint64
	// Ack (≥ 1, ≤ Seq): the client's lowest call whose answer it has not
	// received; every call of this lease numbered below Ack has been
	// answered, so the state forgets their answers and refuses them if they
	// arrive again (Raft thesis §6.3).
	Ack uint64
	// Open: the calls numbered between Ack and Seq (exclusive) whose answers
	// the client has not received, in order; every other call below Seq it
	// has answers for (acknowledged the same way).
	Open  []uint64
	TTL   time.Duration // CreateLease
	Owner string        // CreateLease
	// Identity is who created the lease under the server's policy (a
	// certificate's common name, a token's name; "" without a policy):
	// only that identity may use the lease. CreateLease.
	Identity  string
	Name      string        // lock name; the key for Put
	Wait      bool          // Acquire
	LockDelay time.Duration // Acquire
	Token     uint64        // Put; GrantNext, ForceRelease: the grant meant
	Value     []byte        // Put
	Renewals  uint64        // Expire
	Elapsed   time.Duration // Tick
	Addr      string        // SetNode
}

// Code is the outcome of applying a command.
type Code uint8

// Outcomes. OK and Queued change state; the others change nothing.
const (
	OK Code = iota
	// Queued: the acquire joined the lock's FIFO queue.
	Queued
	// LeaseNotFound: no live lease has that id (never existed, expired or revoked).
	LeaseNotFound
	// LockHeld: the lock is held by another lease, or in lock-delay.
	LockHeld
	// AlreadyHeld: this lease already holds (or already waits for) the lock under another request.
	AlreadyHeld
	// NotHolder: release of a lock the lease does not hold.
	NotHolder
	// NotWaiting: cancel-wait or grant-next found nothing to do.
	NotWaiting
	// Stale: a fenced write with a token below the highest accepted.
	Stale
	// Renewed: an expire lost the race with a renewal; the lease lives.
	Renewed
	// Invalid: the command breaks a rule no valid client sends (checked again here
	// so that a bad entry in the log cannot corrupt state).
	Invalid
	// Ended: a retried Acquire whose grant (Token) has ended since (released
	// or force-released), or a ForceRelease whose grant is no longer held.
	Ended
	// Cancelled: a retried Acquire whose wait was cancelled.
	Cancelled
	// Answered: a call numbered below the lease's acknowledged floor arrived
	// again: a late duplicate of a call whose answer the client has. Nothing
	// is done.
	Answered
	// TooManyCalls: the lease has MaxCallsInFlight calls unacknowledged.
	TooManyCalls
)

var codeNames = [...]string{
	OK: "ok", Queued: "queued", LeaseNotFound: "lease not found", LockHeld: "lock held",
	AlreadyHeld: "already held", NotHolder: "not holder", NotWaiting: "not waiting",
	Stale: "stale token", Renewed: "renewed", Invalid: "invalid", Ended: "grant ended",
	Cancelled: "wait cancelled", Answered: "already answered", TooManyCalls: "too many calls in flight",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Result is what Apply returns for one command.
type Result struct {
	Code Code
	// Token: the grant's token (Acquire), the highest accepted token (Stale),
	// the holder's token (LockHeld).
	Token uint64
	// Lease: the id of the lease created (CreateLease; on a retry, the first attempt's).
	Lease LeaseID
	// LeaseNumber: the public number of the lease created, granted or holding.
	LeaseNumber uint64
	// Owner: the holder's owner label (LockHeld).
	Owner string
	// Delayed: the lock is free but in lock-delay (LockHeld).
	Delayed bool
	// TTL: the lease's TTL (CreateLease, Renew).
	TTL time.Duration
	// Released: locks released by Revoke, in name order.
	Released []string
	// Held: the tokens of the locks the lease holds, in name order (Renew),
	// so a holder learns of a grant an admin ended.
	Held []uint64
	// Reason explains Invalid.
	Reason string
	// Events are the side effects the server must act on, in order.
	Events []Event
}

// EventKind says what happened.
type EventKind uint8

// Events. The lock events (Granted through WaitEnded) are what a Watch
// reports; LeaseStarted, LeaseRenewed and LeaseEnded concern leases alone.
const (
	// LeaseStarted: a lease was created (Lease, TTL).
	LeaseStarted EventKind = iota + 1
	// LeaseRenewed: a lease was renewed (Lease, TTL, Renewals).
	LeaseRenewed
	// LeaseEnded: a lease was revoked or expired (Lease).
	LeaseEnded
	// Granted: a lock was granted (Lease, Owner, Name, Token), directly or
	// to a waiter.
	Granted
	// Released: a lock lost its holder (Name, Lease, Owner, Token of the
	// grant that ended, Cause: released, expired, revoked or forced).
	Released
	// DelayStarted: a lock entered lock-delay (Name, Delay, Token of the
	// grant that expired); the leader proposes GrantNext with that Token once
	// it has passed.
	DelayStarted
	// WaitCancelled: a lease's queued Acquire left the queue because its call
	// was cancelled (Lease, Owner, Name, Seq).
	WaitCancelled
	// DelayEnded: a lock's lock-delay ended (Name, Token of the grant that
	// expired); the next waiter, if any, is granted in the same command.
	DelayEnded
	// WaitStarted: a lease's Acquire joined a lock's queue (Lease, Owner,
	// Name, Seq).
	WaitStarted
	// WaitEnded: a lease left a lock's queue because the lease ended (Lease,
	// Owner, Name, Seq, Cause: expired or revoked).
	WaitEnded
)

var eventNames = [...]string{
	LeaseStarted: "lease-started", LeaseRenewed: "lease-renewed", LeaseEnded: "lease-ended",
	Granted: "granted", Released: "released", DelayStarted: "lock-delay-started",
	WaitCancelled: "wait-cancelled", DelayEnded: "lock-delay-ended", WaitStarted: "wait-started",
	WaitEnded: "wait-ended",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// IsLockEvent reports whether k is an event of a lock (what a Watch reports).
func (k EventKind) IsLockEvent() bool {
	return k >= Granted && k <= WaitEnded
}

// Cause says why a grant or a wait ended.
type Cause uint8

// Causes.
const (
	// CauseReleased: the holder released the lock.
	CauseReleased Cause = iota + 1
	// CauseExpired: the holder's (or waiter's) lease expired.
	CauseExpired
	// CauseRevoked: the holder's (or waiter's) lease was revoked.
	CauseRevoked
	// CauseForced: an admin force-released the grant.
	CauseForced
)

var causeNames = [...]string{CauseReleased: "released", CauseExpired: "expired", CauseRevoked: "revoked", CauseForced: "force-released"}

func (c Cause) String() string {
	if int(c) < len(causeNames) && causeNames[c] != "" {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// Event is a side effect of a command, for the server (wake a waiter,
// schedule an expiry or a lock-delay, update metrics, tell watchers).
type Event struct {
	Kind  EventKind
	Lease LeaseID
	// Number is the lease's public number (0 only if the lease is unknown).
	Number uint64
	// Owner is the lease's owner label (lock events of a lease).
	Owner    string
	Name     string
	Token    uint64
	TTL      time.Duration
	Renewals uint64
	Delay    time.Duration
	Seq      uint64 // the call (WaitStarted, WaitCancelled, WaitEnded)
	Cause    Cause  // Released, WaitEnded
}
