// Package redislock is the usual single-Redis lock — SET key random-value
// NX PX ttl, renewed and released by scripts that first compare the value —
// in the shape of fence's client.Lease. It is an EFFICIENCY lock only: it
// keeps two workers from doing the same work most of the time. It does not
// protect data.
//
// # What it does not protect
//
// Two holders can act at once, and nothing in this package can stop it:
//
//   - A holder that pauses (GC, VM migration, SIGSTOP, swap) past the TTL
//     wakes up still running its work while another holder has the lock.
//     Checking Err just before a write does not help: the pause can fall
//     between the check and the write.
//   - Redis expires the key on its own clock, stored as an absolute Unix
//     time: a step of the Redis host's wall clock ends the lock early.
//   - Redis replicates asynchronously: after a failover the new primary may
//     never have seen the key, and grants it again. A restart without
//     persistence forgets every lock.
//   - There is no fencing token: storage cannot tell the old holder's write
//     from the new one's, so it cannot refuse it.
//
// Use it where a rare double run is harmless (a duplicate report, wasted
// CPU) or the work is idempotent. When a second holder would damage data,
// use fence's lock ([github.com/fencehq/fence/client]): its grants carry a
// fencing token committed through a majority, and package
// [github.com/fencehq/fence/fencing] (or
// [github.com/fencehq/fence/fencing/fencingredis], for data kept in
// Redis) makes the storage refuse a stale holder's write.
//
// # Basics
//
// A [Locker] takes locks on one go-redis client; a [Lease] is one held lock.
// [Locker.TryLock] fails at once with [ErrLocked] if the key is taken;
// [Locker.Lock] waits for it; [Locker.Do] runs a function under it:
//
//	locks := redislock.New(rdb)
//	err := locks.Do(ctx, "lock:report-job", func(ctx context.Context) error {
//		return sendDailyReport(ctx) // harmless if, rarely, it runs twice
//	}, redislock.WithTTL(30*time.Second))
//
// It is a package of its own, under client/ but not imported by it, so a
// program that uses fence's client does not pull in a Redis driver, and one
// that wants only this lock does not pull in gRPC.
//
// The lock name is the Redis key. Its value is 128 random bits, this
// holder's secret: renewal (every TTL/3: PEXPIRE if the value is still
// ours) and release (DEL if the value is still ours) are Lua scripts, so
// neither touches a lock that has passed to someone else.
//
// The holder trusts the lock until its local deadline: the moment the last
// successful renewal (or the SET) was sent, plus the TTL, minus a safety
// margin (TTL/10 by default, never less than TTL × 1000 ppm + 10ms), on
// CLOCK_BOOTTIME, which keeps counting while the host is suspended. At that
// deadline Done closes whether or not Redis answered. A renewal that finds
// the key gone or holding another value ends the lease at once.
//
// # Caveats
//
//   - Lock is not fair. Redis has no queue: a waiter polls with SET NX,
//     backing off with jitter (10ms doubling to WithPoll's maximum, 1s by
//     default), so a newcomer can win over one that waited long, and a
//     waiter sees a free lock up to one poll late.
//   - There is no Token method, on purpose: a number made up here would be
//     mistaken for a fencing token.
//   - Every call can fail; there is no sync.Locker. Stop when Done closes.
//   - One Lease per lock per holder: the Locker does not share a lock
//     between goroutines (a second TryLock of a held name returns ErrLocked).
package redislock
