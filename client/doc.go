// Package client is the Go client of the fence lock service.
//
// # Basics
//
// There are two types. A [Client] talks to the server ([Dial]); a [Lease] is
// one granted lock. Take a lock with [Client.Lock] (waits in FIFO order) or
// [Client.TryLock] (fails at once with [ErrLocked]), or run a function under
// it with [Client.Do]:
//
//	c, err := client.Dial(ctx, []string{"127.0.0.1:7300"},
//		client.WithTLSFiles("fence-data/tls/ca.crt", "fence-data/tls/client.crt", "fence-data/tls/client.key"))
//	...
//	err = c.Do(ctx, "jobs/nightly", func(ctx context.Context, token uint64) error {
//		return writeTotals(ctx, token) // every write carries the token
//	})
//
// To run a job at most once per window across a fleet (a nightly job on
// every host's cron), take the lock [WithOncePer]: a run whose fn returns
// nil is recorded as the lock is released, and for the window after it
// every Lock, TryLock or Do with the option fails with a [*RanError]
// ([ErrRanRecently]) saying when, by whom and with which token it ran. The
// window is measured by the cluster's log, never by a host's clock.
//
// fence servers speak TLS and want a client certificate of the cluster's CA:
// [WithTLSFiles] or [WithTLS] give it (a dev server made by `fence serve`
// keeps a CA and a client certificate in <data-dir>/tls), or FENCE_CA,
// FENCE_CERT and FENCE_KEY name the files. [WithInsecure] talks plaintext to
// a server started with --insecure. With none of these, Dial refuses.
//
// Each Client holds one server lease (a session) per TTL and safety margin,
// shared by all its locks with that TTL and margin and renewed every TTL/3 on
// its Session stream, which carries its Acquire and Release calls too (on a
// server older than that stream: a KeepAlive stream and unary calls). The
// client trusts a lease until its local deadline:
// the moment the last successful renewal was sent, plus the TTL, minus a
// safety margin that follows that lease's own TTL (TTL/10 by default, never
// less than TTL × 1000 ppm + 10ms: two clocks each within NTP's 500 ppm
// frequency tolerance, plus timer latency; see [WithSafetyMargin]). The
// deadline is measured on CLOCK_BOOTTIME, which keeps counting while the host
// is suspended (Go's monotonic clock does not). At that deadline Done closes
// whether or not the server answered; the server's own expiry is never earlier.
//
// # Caveats
//
//   - A Lease can end at any moment without notice (a GC pause, a VM
//     migration, SIGSTOP, a network cut). Always pass Lease.Token() to the
//     storage you write (package fencing) and let it refuse a stale token;
//     no check on this side can close the gap between a check and a write.
//   - Lease.Err and the Context's Err compare the deadline with the clock
//     themselves, so a process that was paused learns of the expiry on its
//     first check after it resumes — check before anything irreversible.
//   - Jeopardy reports failing renewals before the deadline passes.
//   - Two goroutines of one Client locking the same name take turns locally;
//     the lock is never shared.
//   - Calls that may have acted are retried with the same request id, so a
//     lost reply never yields a second grant. When a Lock, TryLock or Release
//     ends (its context, or a lost reply) without a known outcome, the client
//     keeps re-sending the same request for a few seconds, gives back a grant
//     it made, and if it still cannot tell, gives up that lease's whole
//     session (all its locks end) rather than leave a grant nobody holds.
//   - TryLock never waits, also not for another caller of the same Client
//     holding the name (LockedError.Local). A second Release returns nil.
//   - Lease.Relock releases and queues again in one step: callers of other
//     Clients already waiting go first, callers of the same Client (who
//     wait locally for the name) do not. The old Lease ends when it is
//     called; the new grant always has a new, larger token.
//   - Lease.Context's cause (context.Cause) and Do's error say why a lease
//     ended (errors.Is(err, ErrExpired)); bad arguments match ErrInvalid.
//   - There is no sync.Locker: a lease is not a mutex, and every call can fail.
package client
