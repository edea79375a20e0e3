// Package fsm is fence's replicated state machine: leases, locks with FIFO
// waiters, the fencing-token counter and the fenced key-value resource.
//
// # Basics
//
// There are three types: [Command] (one state change, encoded into raft log
// entries by [EncodeBatch]), [State] (everything replicated) and [Result]
// (what [State.Apply] returns, with [Event]s for the server to act on).
//
// The package is pure: no clock, no goroutines, no I/O, no randomness, no
// dependence on map order. Every replica that applies the same commands in the
// same order reaches the same state, byte for byte ([State.Marshal]).
//
// Time enters only through commands the leader proposes: Tick advances a
// logical clock by the time the leader measured on its monotonic clock,
// Expire ends a lease the leader judged overdue, GrantNext ends a lock-delay.
// Each lease records the logical time of its last renewal, so a new leader
// can tell how long ago that was without reading another node's clock.
//
// # Caveats
//
//   - The token counter is global and grows by exactly one per grant.
//   - A lease that ends (revoke or expire) leaves every queue in the same
//     command, so a waiter's lease is always alive when it is granted.
//   - Expire carries the renewal count the leader saw; if a renewal commits
//     first, the expire is a no-op (result Renewed).
//   - Retries: Acquire and Release remember their answers per lease (the last
//     256 requests); CreateLease remembers its request id while the lease
//     lives. Put is not remembered: a retried Put is idempotent by value, and
//     reports Stale if a newer token wrote in between (the holder must stop).
//   - Once per window (runs.go): a Release with Ran of a grant acquired with
//     a once-per window records the run; an Acquire with a window is refused
//     (RanRecently) while a recorded run is younger than it, on the logical
//     clock, which never runs faster than real time. A record is kept for
//     its own grant's window and forgotten by the Tick that passes it.
//   - Semaphores and read-write locks: a lock has a permit count (1: a mutex,
//     or a read-write lock whose grants may be shared), fixed while the lock
//     exists, and grants (each with its own token and slot); the hand-off
//     is FIFO and grants from the head of the queue while its grant fits (a
//     writer alone, or the readers up to the next writer together). A lease
//     holds at most one grant of a name. Lock-delay is per grant.
//   - Relock: an Acquire with ReleaseToken releases the caller's grant of
//     the name and asks for it again in one command, exactly as a Release
//     followed by an Acquire: the waiters already queued are granted
//     first, the caller joins the back of the queue or, with nobody
//     waiting, gets a new grant (a new token) at once. It refuses
//     (NotHolder, PermitsMismatch) before changing anything.
package fsm
