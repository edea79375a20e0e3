// Package pglease is a lease with a fencing token kept in the data's own
// Postgres database: a lease table and a token sequence, in the shape of
// fence's client.Lease, for a team with one Postgres and no fence server.
// Its tokens guard rows with fencing.Table the same way fence's do.
//
// # Basics
//
// [EnsureSchema] creates the table and the sequence once. A [Locker] takes
// locks on one database handle; a [Lease] is one held lock with its
// fencing token. [Locker.TryLock] fails at once with [ErrLocked] if the
// lock is held; [Locker.Lock] waits for it; [Locker.Do] runs a function
// under it:
//
//	if err := pglease.EnsureSchema(ctx, db); err != nil { ... }
//	locks := pglease.New(db, pglease.WithTTL(30*time.Second))
//	err := locks.Do(ctx, "totals/77", func(ctx context.Context, token uint64) error {
//		return totals.Update(ctx, db, token, 77, map[string]any{"amount": 42000}) // fencing.Table
//	})
//
// A grant is one statement, so one transaction: INSERT … ON CONFLICT (name)
// DO UPDATE … WHERE expires_at <= clock_timestamp() RETURNING token. The
// token comes from a sequence (CACHE 1, NO CYCLE), drawn after the lock's
// row is locked and found expired, so a later grant always gets a larger
// one, and none repeats even if rows are deleted. Expiry is judged by the
// database's clock, never a client's. A renewal (every TTL/3) extends the
// row only for its holder and only while the database has not judged it
// expired; Release frees it only for its holder (a random 128-bit secret).
//
// The holder trusts the lease until its local deadline: the moment the last
// successful renewal (or the grant) was sent, plus the TTL, minus a safety
// margin (TTL/10 by default, never less than TTL × 1000 ppm + 10ms), on
// CLOCK_BOOTTIME, which keeps counting while the host is suspended. At that
// deadline Done closes whether or not the database answered. The database's
// expiry is never earlier: it counts the TTL from when it looked at the
// row, after the send.
//
// The package needs only database/sql: pass a *sql.DB opened with any
// Postgres driver (pgx's stdlib, lib/pq).
//
// # Caveats
//
//   - A Lease can end at any moment without notice (a GC pause, SIGSTOP, a
//     network cut). Pass Token to every write and let the storage refuse a
//     stale one; no check on this side closes the gap between a check and
//     a write.
//   - It relies on one primary. A failover to a synchronous standby keeps
//     every acknowledged grant and the sequence; a failover to an
//     asynchronous one can lose grants and sequence values, and hand out a
//     token that was already used: fenced writes no longer tell the two
//     holders apart. Run synchronous_commit on (the default) and fail over
//     only to a synchronous standby. docs/design.md says more.
//   - Expiry is judged by the database host's wall clock: a step of that
//     clock (or, after a failover, the new primary's clock disagreeing with
//     the old one's) moves every expiry; keep it disciplined by NTP, with
//     offsets well inside the safety margin.
//   - Lock is not fair: there is no queue. A waiter polls, backing off with
//     jitter (10ms doubling to WithPoll's maximum, 1s by default), so a
//     newcomer can win over one that waited long, and a waiter sees a free
//     lock up to one poll late.
//   - The grant draws a token even when it fails, so tokens have gaps.
//     Released rows stay in the table (free), one per lock name ever used.
//   - Every call can fail; there is no sync.Locker. One Lease per lock per
//     holder: a second TryLock of a held name returns ErrLocked.
package pglease
