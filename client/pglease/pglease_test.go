package pglease_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencehq/fence/client/pglease"
	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/dbtest"
)

// setup returns two handles on the test database (two connection pools, as
// two processes would have) and a fresh lease table, dropped with its
// sequence when the test ends.
func setup(t *testing.T) (a, b *sql.DB, table string) {
	t.Helper()
	a, b = dbtest.Open(t, dbtest.Postgres()), dbtest.Open(t, dbtest.Postgres())
	table = dbtest.Table(t, a)
	t.Cleanup(func() { a.Exec("DROP SEQUENCE IF EXISTS " + table + "_token") })
	if err := pglease.EnsureSchema(t.Context(), a, pglease.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	return a, b, table
}

// lockT takes name with TryLock and releases it when the test ends.
func lockT(t *testing.T, k *pglease.Locker, name string, opts ...pglease.Option) *pglease.Lease {
	t.Helper()
	l, err := k.TryLock(t.Context(), name, opts...)
	if err != nil {
		t.Fatalf("TryLock %q: %v", name, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l
}

// expireInDB makes the database judge name's lease expired, as if its TTL
// had passed there without a renewal (or the database host's clock had
// stepped), while the holder's own clock says nothing of it.
func expireInDB(t *testing.T, db *sql.DB, table, name string) {
	t.Helper()
	if _, err := db.Exec(`UPDATE `+table+` SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
}

// row reads name's row: its holder and whether the database holds it unexpired.
func row(t *testing.T, db *sql.DB, table, name string) (holder string, token int64, live bool) {
	t.Helper()
	err := db.QueryRow(`SELECT holder, token, expires_at > clock_timestamp() FROM `+table+` WHERE name = $1`, name).Scan(&holder, &token, &live)
	if err != nil {
		t.Fatal(err)
	}
	return holder, token, live
}

// TestTryLockExcludes: a held lock refuses every other TryLock, of a Locker
// on another connection pool or of the same one; Release frees it at once;
// a second Release is nil; the next grant has a larger token, also after
// the lock's row was deleted.
func TestTryLockExcludes(t *testing.T) {
	dbA, dbB, table := setup(t)
	ctx := t.Context()
	a, b := pglease.New(dbA, pglease.WithTable(table)), pglease.New(dbB, pglease.WithTable(table))

	la := lockT(t, a, "jobs/nightly")
	for _, k := range []*pglease.Locker{a, b} {
		if l, err := k.TryLock(ctx, "jobs/nightly"); !errors.Is(err, pglease.ErrLocked) {
			t.Fatalf("TryLock of a held lock: %v, %v; want ErrLocked", l, err)
		}
	}
	if err := la.Err(); err != nil || la.Name() != "jobs/nightly" || la.Token() == 0 {
		t.Fatalf("holder: %v, name %q, token %d", err, la.Name(), la.Token())
	}
	other := lockT(t, b, "jobs/other") // another name is another lock
	if other.Token() <= la.Token() {
		t.Fatalf("token %d of a later grant, after %d", other.Token(), la.Token())
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	<-la.Done()
	if err := la.Err(); !errors.Is(err, pglease.ErrReleased) {
		t.Fatalf("Err after Release: %v, want ErrReleased", err)
	}
	lb := lockT(t, b, "jobs/nightly")
	if lb.Token() <= other.Token() {
		t.Fatalf("the next holder's token %d, after %d", lb.Token(), other.Token())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dbA.Exec(`DELETE FROM ` + table); err != nil { // someone tidies up the table
		t.Fatal(err)
	}
	if lc := lockT(t, a, "jobs/nightly"); lc.Token() <= lb.Token() {
		t.Fatalf("token %d after the rows were deleted, after %d: repeated", lc.Token(), lb.Token())
	}
}

// waitDeadlineMoves waits for a renewal to land (no time bound: the test's
// own deadline catches a hang).
func waitDeadlineMoves(t *testing.T, l *pglease.Lease, from time.Time) {
	t.Helper()
	for l.Deadline().Equal(from) {
		if err := l.Err(); err != nil {
			t.Fatalf("while waiting for a renewal: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitRenewalRefused waits for the lease to end after its clock moved to a
// renewal, failing at once if the renewal succeeded (the deadline moved
// from before) instead of waiting forever.
func waitRenewalRefused(t *testing.T, l *pglease.Lease, before time.Time) {
	t.Helper()
	for l.Err() == nil {
		if !l.Deadline().Equal(before) {
			t.Fatal("the renewal succeeded")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRenewalKeepsItPastTTL: on a fake clock, renewals every TTL/3 keep the
// lease valid past its TTL, and each one moves the row's expiry to the
// database's clock + TTL (the test first brings it down to 5s from now, so
// only a renewal can take it back up).
func TestRenewalKeepsItPastTTL(t *testing.T) {
	db, _, table := setup(t)
	clk := clocktest.New()
	const ttl = 30 * time.Second
	l := lockT(t, pglease.New(db, pglease.WithTable(table), pglease.WithClock(clk), pglease.WithTTL(ttl)), "x")
	holder, token, _ := row(t, db, table, "x")
	for i := range 4 { // 4 × TTL/3 > TTL
		db.Exec(`UPDATE ` + table + ` SET expires_at = clock_timestamp() + interval '5 seconds' WHERE name = 'x'`)
		before := l.Deadline()
		clk.Advance(ttl / 3)
		waitDeadlineMoves(t, l, before)
		if err := l.Err(); err != nil {
			t.Fatalf("after %d renewals: %v", i+1, err)
		}
		var left float64
		db.QueryRow(`SELECT extract(epoch FROM expires_at - clock_timestamp()) FROM ` + table + ` WHERE name = 'x'`).Scan(&left)
		if left <= 5 {
			t.Fatalf("after renewal %d the row expires in %vs: not renewed to %v", i+1, left, ttl)
		}
	}
	if got := l.Deadline().Sub(clk.Now()); got != ttl-ttl/10 {
		t.Fatalf("deadline %v after the last renewal was sent, want TTL − TTL/10 = %v", got, ttl-ttl/10)
	}
	if h, tok, _ := row(t, db, table, "x"); h != holder || tok != token {
		t.Fatalf("the row changed hands: %q/%d, was %q/%d", h, tok, holder, token)
	}
}

// TestStoppedRenewerLosesIt: a holder whose renewals stop (its fake clock
// never moves) loses the lock when the database's clock passes its TTL —
// its own clock never said so — and a waiting Lock on another connection
// then gets it with a larger token. The old holder's next renewal finds
// the lock gone (ErrLost).
func TestStoppedRenewerLosesIt(t *testing.T) {
	dbA, dbB, table := setup(t)
	clk := clocktest.New()
	a := lockT(t, pglease.New(dbA, pglease.WithTable(table), pglease.WithClock(clk), pglease.WithTTL(300*time.Millisecond)), "x")
	b, err := pglease.New(dbB, pglease.WithTable(table), pglease.WithPoll(20*time.Millisecond)).Lock(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	if b.Token() <= a.Token() {
		t.Fatalf("the new holder's token %d, the stopped one's %d", b.Token(), a.Token())
	}
	if err := a.Err(); err != nil {
		t.Fatalf("the stopped holder's own clock has not moved, yet: %v", err)
	}
	before := a.Deadline()
	clk.Advance(100 * time.Millisecond) // its first renewal
	waitRenewalRefused(t, a, before)
	if err := a.Err(); !errors.Is(err, pglease.ErrExpired) || !errors.Is(err, pglease.ErrLost) {
		t.Fatalf("the stopped holder: %v, want ErrExpired and ErrLost", err)
	}
	if err := b.Err(); err != nil {
		t.Fatalf("the new holder: %v", err)
	}
}

// TestLateRenewalDoesNotResurrect: once the database judges a lease expired,
// its holder's renewal fails (ErrLost) even though nobody else took the
// lock, and the row stays expired.
func TestLateRenewalDoesNotResurrect(t *testing.T) {
	db, _, table := setup(t)
	clk := clocktest.New()
	l := lockT(t, pglease.New(db, pglease.WithTable(table), pglease.WithClock(clk), pglease.WithTTL(30*time.Second)), "x")
	expireInDB(t, db, table, "x")
	before := l.Deadline()
	clk.Advance(10 * time.Second) // the first renewal
	waitRenewalRefused(t, l, before)
	if err := l.Err(); !errors.Is(err, pglease.ErrLost) {
		t.Fatalf("a renewal after the database's expiry: %v, want ErrLost", err)
	}
	if _, _, live := row(t, db, table, "x"); live {
		t.Fatal("a renewal after the database's expiry brought the lease back")
	}
}

// TestRenewalOnlyByTheHolder: the lock passed to another holder while the
// first still trusted its lease; the first one's renewal must not extend
// the new holder's row, and ends the first lease.
func TestRenewalOnlyByTheHolder(t *testing.T) {
	dbA, dbB, table := setup(t)
	clk := clocktest.New()
	a := lockT(t, pglease.New(dbA, pglease.WithTable(table), pglease.WithClock(clk), pglease.WithTTL(30*time.Second)), "x")
	expireInDB(t, dbA, table, "x")
	b := lockT(t, pglease.New(dbB, pglease.WithTable(table), pglease.WithTTL(30*time.Second)), "x")
	dbB.Exec(`UPDATE ` + table + ` SET expires_at = clock_timestamp() + interval '5 seconds' WHERE name = 'x'`)
	before := a.Deadline()
	clk.Advance(10 * time.Second) // a's first renewal
	waitRenewalRefused(t, a, before)
	if err := a.Err(); !errors.Is(err, pglease.ErrLost) {
		t.Fatalf("the old holder's renewal: %v, want ErrLost", err)
	}
	var left float64
	dbB.QueryRow(`SELECT extract(epoch FROM expires_at - clock_timestamp()) FROM ` + table + ` WHERE name = 'x'`).Scan(&left)
	if left > 5 {
		t.Fatalf("the new holder's row now expires in %vs: extended by the old holder", left)
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseOnlyByTheHolder: the old holder's Release after the lock
// passed on reports the loss and leaves the new holder's lock alone.
func TestReleaseOnlyByTheHolder(t *testing.T) {
	dbA, dbB, table := setup(t)
	ctx := t.Context()
	a := lockT(t, pglease.New(dbA, pglease.WithTable(table), pglease.WithClock(clocktest.New())), "x")
	expireInDB(t, dbA, table, "x")
	kb := pglease.New(dbB, pglease.WithTable(table))
	b := lockT(t, kb, "x")
	holder, _, _ := row(t, dbB, table, "x")

	err := a.Release(ctx)
	if !errors.Is(err, pglease.ErrExpired) || !errors.Is(err, pglease.ErrLost) {
		t.Fatalf("Release of a lock another holder has: %v, want ErrExpired and ErrLost", err)
	}
	if h, tok, live := row(t, dbB, table, "x"); h != holder || uint64(tok) != b.Token() || !live {
		t.Fatalf("after the old holder's Release the row is %q/%d (live %v), want the new holder's", h, tok, live)
	}
	if _, err := kb.TryLock(ctx, "x"); !errors.Is(err, pglease.ErrLocked) {
		t.Fatalf("TryLock after the old holder's Release: %v, want ErrLocked", err)
	}
}

// TestTokenDrawnAfterTheRowLock: a grant that had to wait for the lock's
// row (locked here by a transaction that frees the lock) draws its token
// after the wait, so it is larger than every token drawn meanwhile — else
// a grant decided late could carry a token older than its predecessor's,
// whose stale writes would then pass the fence.
func TestTokenDrawnAfterTheRowLock(t *testing.T) {
	dbA, dbB, table := setup(t)
	ctx := t.Context()
	first := lockT(t, pglease.New(dbA, pglease.WithTable(table)), "x")
	tx, err := dbA.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`UPDATE ` + table + ` SET expires_at = '-infinity' WHERE name = 'x'`); err != nil {
		t.Fatal(err)
	}
	got := make(chan *pglease.Lease, 1)
	go func() {
		l, err := pglease.New(dbB, pglease.WithTable(table)).TryLock(ctx, "x")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for { // until the grant waits for the row
		var n int
		dbA.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO "' || $1 || '"%'`, table).Scan(&n)
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var meanwhile int64
	if err := tx.QueryRow(`SELECT nextval('` + table + `_token')`).Scan(&meanwhile); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)
	if int64(l.Token()) <= meanwhile || l.Token() <= first.Token() {
		t.Fatalf("token %d, drawn before the wait: a token %d was drawn meanwhile (the first grant had %d)", l.Token(), meanwhile, first.Token())
	}
}

// TestTokensNeverRepeat: 8 workers take 3 locks 15 times each with Lock
// and a TryLock now and then (whose failures draw tokens too); no two
// workers are ever inside one lock at once, no token is handed out twice,
// and each lock's tokens grow in the order it was granted.
//
// Under SERIALIZABLE (as the database's default isolation) racing grants
// fail with serialization errors instead of waiting; Lock retries them.
func TestTokensNeverRepeat(t *testing.T) {
	for _, iso := range []string{"read committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			_, _, table := setup(t)
			pg := dbtest.Postgres()
			pg.DSN += "&default_transaction_isolation=" + strings.ReplaceAll(iso, " ", "%20")
			db := dbtest.Open(t, pg)
			var got string
			if err := db.QueryRow(`SHOW default_transaction_isolation`).Scan(&got); err != nil || got != iso {
				t.Fatalf("isolation %q (%v), want %q", got, err, iso)
			}
			contend(t, db, table)
		})
	}
}

func contend(t *testing.T, db *sql.DB, table string) {
	ctx := t.Context()
	k := pglease.New(db, pglease.WithTable(table), pglease.WithPoll(5*time.Millisecond))
	names := []string{"a", "b", "c"}
	const workers, turns = 8, 15
	var mu sync.Mutex
	granted := map[string][]uint64{} // per lock, in grant order (appended inside the lock)
	inside := map[string]*atomic.Int64{}
	for _, n := range names {
		inside[n] = new(atomic.Int64)
	}
	var overlaps atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range turns {
				name := names[(w+i)%len(names)]
				if i%4 == 0 {
					if l, err := k.TryLock(ctx, name); err == nil {
						l.Release(ctx)
					}
				}
				l, err := k.Lock(ctx, name)
				if err != nil {
					t.Error(err)
					return
				}
				if inside[name].Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				granted[name] = append(granted[name], l.Token())
				mu.Unlock()
				db.Exec(`SELECT 1`) // a round trip inside, to widen the window
				inside[name].Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[uint64]string{}
	total := 0
	for name, toks := range granted {
		for i, tok := range toks {
			if by, ok := seen[tok]; ok {
				t.Fatalf("token %d granted twice: %s and %s", tok, by, name)
			}
			seen[tok] = name
			if i > 0 && tok <= toks[i-1] {
				t.Fatalf("lock %s: token %d granted after %d", name, tok, toks[i-1])
			}
		}
		total += len(toks)
	}
	if overlaps.Load() != 0 || total != workers*turns {
		t.Fatalf("%d overlaps, %d turns taken of %d", overlaps.Load(), total, workers*turns)
	}
}

// TestLockWaits: Lock waits while the lock is held and takes it once it is
// released; a Lock whose context ends gives up with the context's error.
func TestLockWaits(t *testing.T) {
	db, _, table := setup(t)
	ctx := t.Context()
	k := pglease.New(db, pglease.WithTable(table), pglease.WithPoll(20*time.Millisecond))
	a := lockT(t, k, "x")

	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := k.Lock(short, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with an ended context on a held lock: %v, want context.Canceled", err)
	}
	got := make(chan *pglease.Lease)
	go func() {
		l, err := k.Lock(ctx, "x")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.FailNow()
	}
	defer b.Release(ctx)
	if err := b.Err(); err != nil || b.Token() <= a.Token() {
		t.Fatalf("the waiter's lease: %v, token %d after %d", err, b.Token(), a.Token())
	}
}

// TestDo: fn runs under the lock with the grant's token, the lock is
// released afterwards, and fn's error comes back.
func TestDo(t *testing.T) {
	db, _, table := setup(t)
	ctx := t.Context()
	k := pglease.New(db, pglease.WithTable(table))
	errFn := errors.New("fn failed")
	err := k.Do(ctx, "x", func(ctx context.Context, token uint64) error {
		if _, err := k.TryLock(ctx, "x"); !errors.Is(err, pglease.ErrLocked) {
			t.Errorf("TryLock inside Do: %v, want ErrLocked", err)
		}
		if _, tok, live := row(t, db, table, "x"); uint64(tok) != token || !live {
			t.Errorf("fn got token %d; the row holds %d (live %v)", token, tok, live)
		}
		return errFn
	})
	if !errors.Is(err, errFn) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if h, _, live := row(t, db, table, "x"); h != "" || live {
		t.Fatalf("Do left the lock held: holder %q, live %v", h, live)
	}
}

// faulty is the real database with faults a test switches on: down makes
// every Exec (the renewals, Release) fail, as if the database were
// unreachable; lostReply runs a grant and then reports an error, as if its
// answer was lost.
type faulty struct {
	*sql.DB
	down      atomic.Bool
	lostReply atomic.Bool
}

func (f *faulty) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if f.lostReply.Load() {
		var token int64
		f.DB.QueryRowContext(ctx, query, args...).Scan(&token)
		return f.DB.QueryRowContext(ctx, `SELECT 1/0`) // the error the caller sees
	}
	return f.DB.QueryRowContext(ctx, query, args...)
}

// TestLostGrantReplyGivesBack: a grant whose answer was lost may have taken
// the lock; TryLock reports the error and frees the lock if the grant did
// take it, so it is not held by nobody for a whole TTL.
func TestLostGrantReplyGivesBack(t *testing.T) {
	db, _, table := setup(t)
	f := &faulty{DB: db}
	f.lostReply.Store(true)
	k := pglease.New(f, pglease.WithTable(table))
	if l, err := k.TryLock(t.Context(), "x"); err == nil || errors.Is(err, pglease.ErrLocked) || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("TryLock with a lost answer: %v, %v; want the error", l, err)
	}
	if h, _, live := row(t, db, table, "x"); h != "" || live {
		t.Fatalf("the grant whose answer was lost left the lock held (holder %q, live %v)", h, live)
	}
}

var errDown = errors.New("test: database unreachable")

func (f *faulty) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.DB.ExecContext(ctx, query, args...)
}

// TestJeopardyThenExpiry: renewals that fail put the lease in jeopardy (it
// still holds); at the deadline — the grant's send + TTL − TTL/10 — it
// ends, naming the last renewal error; Release then reports the lease's end.
func TestJeopardyThenExpiry(t *testing.T) {
	db, _, table := setup(t)
	f := &faulty{DB: db}
	clk := clocktest.New()
	l := lockT(t, pglease.New(f, pglease.WithTable(table), pglease.WithClock(clk), pglease.WithTTL(30*time.Second)), "x")
	lctx := l.Context()
	f.down.Store(true)
	clk.Advance(10 * time.Second) // the first renewal fails
	for l.Jeopardy() == nil {
		time.Sleep(time.Millisecond)
	}
	if err := l.Err(); err != nil || !errors.Is(l.Jeopardy(), errDown) {
		t.Fatalf("in jeopardy: Err %v (want nil), Jeopardy %v (want the renewal's error)", err, l.Jeopardy())
	}
	clk.Advance(17*time.Second - time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("1ms before the deadline: %v", err)
	}
	clk.Advance(time.Millisecond)
	<-l.Done()
	<-lctx.Done()
	if err := l.Err(); !errors.Is(err, pglease.ErrExpired) || !strings.Contains(err.Error(), errDown.Error()) || l.Jeopardy() != nil {
		t.Fatalf("at the deadline: %v (jeopardy %v), want ErrExpired naming the renewal error", err, l.Jeopardy())
	}
	if !errors.Is(context.Cause(lctx), pglease.ErrExpired) {
		t.Fatalf("the lease context's cause: %v", context.Cause(lctx))
	}
	f.down.Store(false)
	if err := l.Release(t.Context()); !errors.Is(err, pglease.ErrExpired) {
		t.Fatalf("Release after the deadline: %v, want the lease's ErrExpired", err)
	}
	if h, _, _ := row(t, db, table, "x"); h != "" {
		t.Fatal("Release after the deadline left the holder's own lock in place")
	}
}

// TestBadInput: each bad argument is refused with ErrInvalid before
// anything reaches the database.
func TestBadInput(t *testing.T) {
	db, _, table := setup(t)
	ctx := t.Context()
	k := pglease.New(db, pglease.WithTable(table))
	for _, c := range []struct {
		name string
		lock string
		opts []pglease.Option
		want string
	}{
		{"empty name", "", nil, "empty lock name"},
		{"long name", strings.Repeat("x", pglease.MaxNameBytes+1), nil, "more than 1024"},
		{"NUL in name", "a\x00b", nil, "NUL"},
		{"not UTF-8", "a\xffb", nil, "UTF-8"},
		{"zero TTL", "x", []pglease.Option{pglease.WithTTL(0)}, "TTL 0s"},
		{"sub-microsecond TTL", "x", []pglease.Option{pglease.WithTTL(1500 * time.Nanosecond)}, "whole number of microseconds"},
		{"margin as long as the TTL", "x", []pglease.Option{pglease.WithTTL(time.Second), pglease.WithSafetyMargin(time.Second)}, "shorter than the TTL"},
		{"negative margin", "x", []pglease.Option{pglease.WithSafetyMargin(-time.Second)}, "negative"},
		{"zero poll", "x", []pglease.Option{pglease.WithPoll(0)}, "poll interval"},
		{"table with a quote", "x", []pglease.Option{pglease.WithTable(`t"; DROP TABLE x; --`)}, "must match"},
		{"table with two dots", "x", []pglease.Option{pglease.WithTable("a.b.c")}, "at most one dot"},
		{"table too long for its sequence", "x", []pglease.Option{pglease.WithTable(strings.Repeat("t", 58))}, "at most 57 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := k.TryLock(ctx, c.lock, c.opts...)
			if !errors.Is(err, pglease.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("TryLock: %v, want ErrInvalid saying %q", err, c.want)
			}
			var n int
			db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n)
			if n != 0 {
				t.Fatal("a refused TryLock wrote a row")
			}
		})
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := pglease.New(tx, pglease.WithTable(table)).TryLock(ctx, "x"); !errors.Is(err, pglease.ErrInvalid) || !strings.Contains(err.Error(), "*sql.Tx") {
		t.Fatalf("TryLock on a Locker given a *sql.Tx: %v, want ErrInvalid", err)
	}
	if err := pglease.EnsureSchema(ctx, db, pglease.WithTable("bad-name")); !errors.Is(err, pglease.ErrInvalid) {
		t.Fatalf("EnsureSchema with a bad table name: %v, want ErrInvalid", err)
	}
}

// TestEnsureSchema: it is idempotent, and refuses a sequence whose values
// could repeat (CYCLE) or be handed out of order across sessions (CACHE > 1).
func TestEnsureSchema(t *testing.T) {
	db, _, table := setup(t)
	ctx := t.Context()
	if err := pglease.EnsureSchema(ctx, db, pglease.WithTable(table)); err != nil {
		t.Fatalf("a second EnsureSchema: %v", err)
	}
	for _, alter := range []string{"CACHE 20", "CYCLE"} {
		db.Exec(`ALTER SEQUENCE ` + table + `_token CACHE 1 NO CYCLE`)
		if _, err := db.Exec(`ALTER SEQUENCE ` + table + `_token ` + alter); err != nil {
			t.Fatal(err)
		}
		if err := pglease.EnsureSchema(ctx, db, pglease.WithTable(table)); !errors.Is(err, pglease.ErrSchema) {
			t.Fatalf("EnsureSchema with the sequence altered to %s: %v, want ErrSchema", alter, err)
		}
	}
}
