// Package dblock takes plain locks inside one database: advisory locks and
// row locks in PostgreSQL (first) and MySQL/MariaDB, with the waiting and
// holding bounded and several locks taken in one fixed order.
//
// A plain lock is the right level when all the work happens inside that one
// database, the critical part is short (under a few hundred milliseconds,
// never waiting on a person or a network call) and a crash must release the
// lock without a timer: the database frees it when the transaction or the
// session ends. When many servers share a lock and the work is outside the
// database, take a lease (package client); when a second holder would damage
// data, take a lease and check its token in storage (package fencing).
//
// # Basics
//
// [InTx] runs fn in a transaction holding transaction-scoped advisory locks
// (pg_advisory_xact_lock): it sets lock_timeout (how long it waits for each
// lock, [Options.Timeout]) and idle_in_transaction_session_timeout (how long
// the holder may sit idle inside the transaction before Postgres ends its
// session, [Options.IdleTimeout]) with SET LOCAL, so the settings end with
// the transaction, takes the locks in ascending order of their keys, runs
// fn, and commits if fn returns nil, rolls back otherwise. The locks end
// with the transaction; there is nothing to unlock.
//
// [InSession] holds session-scoped advisory locks (pg_advisory_lock, MySQL's
// GET_LOCK) on one dedicated connection while fn runs, with statements and
// transactions of its own, then unlocks them explicitly. [LockSession] and
// [Session.Unlock] are the same without the closure, on a connection you
// manage.
//
// For pgx, package fencingpgx has LockInTx and LockInSession, and its
// Runner(tx) serves LockTx and LockRow.
//
// [LockRow] locks one row with SELECT … FOR UPDATE, waiting (bounded by
// lock_timeout), not at all ([NoWait]) or skipping a locked row
// ([SkipLocked]); [ForUpdate] only builds that statement.
//
// Failures to lock are typed: errors.Is(err, [ErrLockTimeout]) (the wait
// reached the timeout), [ErrNotAvailable] (NoWait found the lock taken),
// [ErrDeadlock] (the database broke a deadlock by failing this
// transaction), [ErrIdleTimeout]. [Classify] applies the same mapping to an
// error of your own statements.
//
// # Names and keys
//
// Advisory locks are numbers, so a name is mapped to a key: [Key] is the
// first 8 bytes of SHA-256("fence/dblock\x00" + name), a signed 64-bit
// key (pg_advisory_xact_lock(bigint)). With [Options.Namespace] set, the
// two-int form is used instead: pg_advisory_xact_lock(namespace, h), h the
// first 4 bytes of the same hash ([Key2]). Postgres keeps the two forms
// apart (a one-bigint key never equals a two-int key), and two namespaces
// never share a key, so the two-int form lets applications that share a
// database partition the key space by namespace: give each application its
// own.
//
// Two different names can map to the same key. Then they are one lock:
// holders of either wait for each other (over-locking, never
// under-locking: a name is always locked when its holder runs). The odds:
// with n names in use, about n²/2⁶⁵ for the 64-bit key (a billion names:
// one chance in 37) and n²/2³³ within one namespace for the two-int form
// (10,000 names: about 1 in 86; 100,000 names: a collision is likely).
// Keys are deduplicated before locking, so a collision inside one call is
// harmless too. MySQL's GET_LOCK takes a string: dblock passes
// "dblock_" + the 64-bit key in hex (23 characters, under MySQL's 64).
//
// # Order
//
// Every call takes its locks in ascending order of their keys (the
// namespace first in the two-int form), whatever order the names came in,
// so two callers whose sets overlap queue on the first lock they share and
// cannot deadlock each other. Locks you take yourself, in fn or around
// it, are not in that order: take them all through one call.
//
// # Caveats
//
//   - Timeout bounds each lock's wait, not the call: n contended locks may
//     wait up to n × Timeout.
//   - IdleTimeout only counts time with no statement running. When it
//     fires, Postgres ends the holder's whole session (the locks go with
//     it) and fn's next statement, or the commit, fails: keep fn's work
//     inside the database and short.
//   - Session locks outlive transactions, and need the same server session
//     for lock and unlock. Behind PgBouncer in transaction (or statement)
//     pooling mode a session lock is taken on whichever server connection
//     ran that statement and stays there, held by nobody. Do not use
//     InSession through such a pooler: point it at Postgres directly or at
//     a session-mode pool. InSession checks twice and fails with ErrPooled
//     when it notices: while locking (its statements ran in more than one
//     server process) and at the unlock (this session did not hold the
//     lock); it then ends the server process left holding the locks
//     (pg_terminate_backend: a transaction another client runs there
//     fails). Between the two checks it cannot notice: PgBouncer's default
//     (LIFO) hands the same idle server connection back, so the lock looks
//     held while another client's transaction may be using that server
//     connection, and fn's statements may run elsewhere. Tested with
//     PgBouncer 1.18 in transaction mode. Find the mode before you rely on
//     session locks: pool_mode in pgbouncer.ini, or SHOW DATABASES /
//     SHOW CONFIG on PgBouncer's admin console (database "pgbouncer").
//     Transaction-scoped locks (InTx, LockRow) are safe behind any pooler.
//   - MySQL and MariaDB have no transaction-scoped advisory lock: InTx
//     refuses the MySQL dialect; use InSession, or LockRow. GET_LOCK is
//     session-scoped, released by RELEASE_LOCK or when the connection
//     closes (not by COMMIT); it waits whole or fractional seconds, returns
//     0 on timeout (ErrLockTimeout) and NULL on an error (such as the
//     session being killed). Several GET_LOCKs in one session need MySQL
//     5.7 or MariaDB 10.0.2; older servers release the previous lock on
//     each GET_LOCK. Names are at most 64 characters (dblock's are 23).
//   - On MySQL, LockRow waits innodb_lock_wait_timeout (a whole number of
//     seconds, session or global) rather than Options.Timeout; NOWAIT and
//     SKIP LOCKED need MySQL 8.0 or MariaDB 10.6.
package dblock
