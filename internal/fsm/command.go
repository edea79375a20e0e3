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
	// KindAcquire takes a lock (a permit of a semaphore, a shared grant of
	// a read-write lock) or joins its queue. Fields: RequestID, Lease, Seq,
	// Ack, Open, Name, Wait, LockDelay, OncePer, Permits, Shared,
	// ReleaseToken (a relock: release that grant first, in the same command).
	KindAcquire Kind = 5
	// KindRelease gives up a held lock. Fields: RequestID, Lease, Seq, Ack,
	// Open, Name, Ran, Wall.
	KindRelease Kind = 6
	// KindCancelWait leaves a lock's queue (the waiting call ended). Fields:
	// Lease, Name, Seq (of the Acquire that waits: a late CancelWait cannot
	// end a later wait of the same lease).
	KindCancelWait Kind = 7
	// KindGrantNext ends the lock-delay of one grant of a lock and grants
	// what fits to the next waiters. Fields: Name, Token (the token of the
	// grant whose expiry began the delay: a late or retried GrantNext cannot
	// end a later delay, nor another permit's).
	KindGrantNext Kind = 8
	// KindPut writes the fenced key-value resource. Fields: Name (the key), Value, Token.
	KindPut Kind = 9
	// KindTick advances the logical clock by Elapsed, measured on the leader's monotonic clock.
	KindTick Kind = 10
	// KindSetNode records a node's client (gRPC) address: Name (node id), Addr.
	// A leader proposes it for itself on takeover, so followers can point
	// clients at it.
	KindSetNode Kind = 11
	// KindForceRelease (admin) ends one grant: the grant of lock Name with
	// Token, if it is held, handed at once to the next waiters. The holder's
	// lease and its other locks live on. Fields: RequestID, Name, Token.
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
	// OncePer (Acquire; 0: none) asks for the lock only if no run of it
	// was recorded within this window of logical time (see Ran); the grant
	// keeps the window, and a run it records is kept that long.
	OncePer time.Duration
	// Ran (Release): the run this grant guarded succeeded; if the grant
	// has a once-per window, record the run (token, holder, the logical
	// clock now) before releasing.
	Ran bool
	// Wall (Release with Ran): the leader's wall clock when it proposed the
	// release, Unix nanoseconds, for people only ("ran at …"): no decision
	// reads it.
	Wall int64
	// Permits (Acquire; 0: one, a mutex): the lock is a semaphore of this
	// many permits (2…MaxPermits). The count is fixed while the lock
	// exists; an Acquire that asks another is refused (PermitsMismatch).
	Permits uint32
	// Shared (Acquire, of a lock of one permit): a reader's grant of a
	// read-write lock, held beside other readers, never beside a writer (an
	// Acquire without Shared).
	Shared bool
	// ReleaseToken (Acquire; 0: none) makes the Acquire a relock: the
	// caller's lease releases its grant of Name with this token and asks for
	// the lock again in this one command, as a Release followed by an
	// Acquire would: the waiters already queued are granted first and the
	// caller joins the back of the queue, or, with nobody waiting, is
	// granted again at once with a new token. The caller must hold that
	// grant (NotHolder otherwise, and nothing changes); a relock waits
	// (Wait) and has no once-per window.
	ReleaseToken uint64
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
	// LockHeld: the lock is held by another lease (every permit taken, a
	// writer holding or waiting for a reader, any grant for a writer), or in
	// lock-delay, or others wait ahead.
	LockHeld
	// AlreadyHeld: this lease already holds (or already waits for) the lock under another request.
	AlreadyHeld
	// NotHolder: release of a lock the lease does not hold, or a relock
	// (Acquire with ReleaseToken) of a grant the lease does not hold (ended,
	// or another token).
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
	// RanRecently: an Acquire with a once-per window found a run of the
	// lock recorded inside it (Result.Run says which); a queued one found
	// it when its turn came and left the queue.
	RanRecently
	// PermitsMismatch: an Acquire asked for a lock with another permit count
	// than the lock has (Result.Permits) while it exists.
	PermitsMismatch
)

var codeNames = [...]string{
	OK: "ok", Queued: "queued", LeaseNotFound: "lease not found", LockHeld: "lock held",
	AlreadyHeld: "already held", NotHolder: "not holder", NotWaiting: "not waiting",
	Stale: "stale token", Renewed: "renewed", Invalid: "invalid", Ended: "grant ended",
	Cancelled: "wait cancelled", Answered: "already answered", TooManyCalls: "too many calls in flight",
	RanRecently: "ran recently", PermitsMismatch: "permits mismatch",
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
	// Slot: the grant's slot, 0…permits−1 (Acquire OK, ForceRelease).
	Slot uint32
	// Shared: the grant is a reader's (Acquire OK).
	Shared bool
	// Permits: the lock's permit count (PermitsMismatch).
	Permits uint32
	// Lease: the id of the lease created (CreateLease; on a retry, the first attempt's).
	Lease LeaseID
	// LeaseNumber: the public number of the lease created, granted or holding.
	LeaseNumber uint64
	// Owner: the holder's owner label (LockHeld).
	Owner string
	// Delayed: no grant of the lock is held, but one is in lock-delay (LockHeld).
	Delayed bool
	// TTL: the lease's TTL (CreateLease, Renew).
	TTL time.Duration
	// Released: locks released by Revoke, in name order.
	Released []string
	// Held: the tokens of the locks the lease holds, in name order (Renew),
	// so a holder learns of a grant an admin ended.
	Held []uint64
	// Run: the recorded run inside the window (RanRecently).
	Run RunView
	// Reason explains Invalid.
	Reason string
	// Events are the side effects the server must act on, in order.
	Events []Event
}

// EventKind says what happened.
type EventKind uint8

// Events. The lock events (Granted through WaitEnded) and Written are what a
// Watch reports; LeaseStarted, LeaseRenewed and LeaseEnded concern leases
// alone.
const (
	// LeaseStarted: a lease was created (Lease, TTL).
	LeaseStarted EventKind = iota + 1
	// LeaseRenewed: a lease was renewed (Lease, TTL, Renewals, Slack).
	LeaseRenewed
	// LeaseEnded: a lease was revoked or expired (Lease).
	LeaseEnded
	// Granted: a lock was granted (Lease, Owner, Name, Token, Slot, Shared,
	// and the lease's TTL), directly or to a waiter.
	Granted
	// Released: a grant of a lock ended (Name, Lease, Owner, Token, Slot,
	// Shared of the grant that ended, Cause: released, expired, revoked or
	// forced).
	Released
	// DelayStarted: a grant of a lock entered lock-delay (Name, Delay,
	// Token, Slot, Shared of the grant that expired); the leader proposes
	// GrantNext with that Token once it has passed.
	DelayStarted
	// WaitCancelled: a lease's queued Acquire left the queue because its call
	// was cancelled, or because, at its turn, a run of the lock was recorded
	// inside its once-per window (its call answers RanRecently) (Lease,
	// Owner, Name, Seq).
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
	// Written: the fenced key Name was written (Put) with Token; Value is
	// the value stored (shared with the state: never modify it).
	Written
)

var eventNames = [...]string{
	LeaseStarted: "lease-started", LeaseRenewed: "lease-renewed", LeaseEnded: "lease-ended",
	Granted: "granted", Released: "released", DelayStarted: "lock-delay-started",
	WaitCancelled: "wait-cancelled", DelayEnded: "lock-delay-ended", WaitStarted: "wait-started",
	WaitEnded: "wait-ended", Written: "written",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Watched reports whether k is what a Watch reports: an event of a lock,
// or a write of a fenced key.
func (k EventKind) Watched() bool {
	return k >= Granted && k <= Written
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
	// Slack (LeaseRenewed) is how much of the lease was left when the
	// renewal applied, on the log clock: its deadline (last renewal plus
	// TTL) minus the clock. Negative: the lease was overdue (the leader
	// had not expired it yet). Not encoded anywhere: events are in memory.
	Slack  time.Duration
	Seq    uint64 // the call (WaitStarted, WaitCancelled, WaitEnded)
	Slot   uint32 // the grant's slot (Granted, Released, DelayStarted)
	Shared bool   // a reader's grant (Granted, Released, DelayStarted)
	Cause  Cause  // Released, WaitEnded
	Value  []byte // Written
}
