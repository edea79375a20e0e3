package fsm

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// TestRelockSnapshotMidQueue: a state taken in a snapshot while relocks
// wait (a mutex relocked behind a waiter with a lock-delay of its own, a
// semaphore's permit relocked behind a full queue, a refused relock
// remembered) and restored elsewhere goes on exactly as the original: the
// same results (codes, tokens, slots, events) and the same bytes for the
// rest of the run — the relocker's turn, the retries of the relocks, its
// expiry with the relock's lock-delay.
func TestRelockSnapshotMidQueue(t *testing.T) {
	history := []Command{
		cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3),
		cmdAcquire(1, 4, "a", false), cmdAcquire(2, 5, "a", true),
		withDelay(cmdRelock(1, 6, "a", 1), 3*time.Second), // 2 granted (token 2), 1 queued
		withPermits(cmdSem(1, 7, "s", false, 2), 2), cmdSem(2, 8, "s", false, 2), cmdSem(3, 9, "s", true, 2),
		withPermits(cmdRelock(1, 10, "s", 3), 2), // 3 granted slot 0 (token 5), 1 queued
		cmdRelock(3, 11, "a", 1),                 // refused: NotHolder, remembered
	}
	orig := withHistory(t, history[:len(history)-1])
	if r := orig.Apply(&history[len(history)-1]); r.Code != NotHolder {
		t.Fatalf("the stale relock: %v, want NotHolder", r.Code)
	}
	snap := orig.Marshal(nil)
	restored, err := Unmarshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	rest := []Command{
		withDelay(cmdRelock(1, 6, "a", 1), 3*time.Second), // retries answer as before
		withPermits(cmdRelock(1, 10, "s", 3), 2),
		cmdRelock(3, 11, "a", 1),
		cmdRelease(2, 12, "a"), // 1's relock of a is granted
		cmdRelease(3, 13, "s"), // 1's relock of s is granted
		withDelay(cmdRelock(1, 6, "a", 1), 3*time.Second),
		withPermits(cmdRelock(1, 10, "s", 3), 2),
		{Kind: KindExpire, Lease: id(1)}, // a enters the relock's lock-delay
		{Kind: KindTick, Elapsed: 4 * time.Second},
	}
	for i := range rest {
		a, b := rest[i], rest[i]
		ra, rb := orig.Apply(&a), restored.Apply(&b)
		if !reflect.DeepEqual(ra, rb) {
			t.Fatalf("command %d (%v): original %+v, restored %+v", i, rest[i].Kind, ra, rb)
		}
		if !bytes.Equal(orig.Marshal(nil), restored.Marshal(nil)) {
			t.Fatalf("command %d (%v): the states part", i, rest[i].Kind)
		}
		if i == 7 && !hasDelay(ra, 3*time.Second) {
			t.Fatalf("the expiry of the relocked grant: %+v, want its 3s lock-delay", ra.Events)
		}
	}
}

// TestRelockRetriedAsAcquire: a call is its request id and number, not its
// form: a plain Acquire retried as a relock (release_token added) answers
// the Acquire's grant and releases nothing; a relock retried as a plain
// Acquire answers the relock's outcome (its grant, or Queued) and grants
// nothing more; a Release with the relock's id and number is refused
// (Invalid). None of them changes the state or emits an event.
func TestRelockRetriedAsAcquire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []Command
		retry   Command
		want    Code
		token   uint64
	}{
		{"an acquire retried as a relock", []Command{cmdCreate(1, 1), cmdAcquire(1, 4, "a", true)},
			cmdRelock(1, 4, "a", 1), OK, 1},
		{"a granted relock retried as an acquire", []Command{cmdCreate(1, 1), cmdAcquire(1, 4, "a", true), cmdRelock(1, 7, "a", 1)},
			cmdAcquire(1, 7, "a", true), OK, 2},
		{"a queued relock retried as an acquire", []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 4, "a", true),
			cmdAcquire(2, 5, "a", true), cmdRelock(1, 7, "a", 1)}, cmdAcquire(1, 7, "a", true), Queued, 0},
		{"a queued relock retried as a relock of the waiter's token", []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 4, "a", true),
			cmdAcquire(2, 5, "a", true), cmdRelock(1, 7, "a", 1)}, cmdRelock(1, 7, "a", 2), Queued, 0},
		{"a relock's number reused by a release", []Command{cmdCreate(1, 1), cmdAcquire(1, 4, "a", true), cmdRelock(1, 7, "a", 1)},
			cmdRelease(1, 7, "a"), Invalid, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := withHistory(t, tc.history)
			before, counter := withoutCalls(s), s.Token()
			r := s.Apply(&tc.retry)
			if r.Code != tc.want || r.Token != tc.token {
				t.Fatalf("retry: %v token %d, want %v token %d", r.Code, r.Token, tc.want, tc.token)
			}
			if !bytes.Equal(before, withoutCalls(s)) || s.Token() != counter || len(r.Events) != 0 {
				t.Fatalf("the retry acted: events %+v, counter %d → %d", r.Events, counter, s.Token())
			}
		})
	}
}

// TestRelockWhileWaitingElsewhere: a lease that holds a and waits for b
// relocks a: it is granted a again (a new token) and still waits for b,
// first in b's queue; b's release then grants it b. A second permit of a
// semaphore for a lease that holds one is AlreadyHeld, so a relock always
// names the lease's only grant of the name.
func TestRelockWhileWaitingElsewhere(t *testing.T) {
	s := withHistory(t, []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false),
		cmdAcquire(2, 4, "b", false), cmdAcquire(1, 5, "b", true)})
	mustCode(t, s, cmdRelock(1, 6, "a", 1), OK)
	wantGrants(t, s, "a", grantRow{lease: 1, token: 3})
	if q := s.Queue("b"); len(q) != 1 || q[0].Number != 1 {
		t.Fatalf("b's queue after the relock of a: %+v, want lease 1", q)
	}
	mustCode(t, s, cmdRelease(2, 7, "b"), OK)
	wantGrants(t, s, "b", grantRow{lease: 1, token: 4})
	if a, _ := s.Answer(id(1), 5, "b"); a.Code != OK || a.Token != 4 {
		t.Fatalf("the wait for b: %+v, want OK token 4", a)
	}

	sem := withHistory(t, []Command{cmdCreate(1, 1), cmdSem(1, 2, "s", false, 3)})
	mustCode(t, sem, cmdSem(1, 3, "s", true, 3), AlreadyHeld)
	mustCode(t, sem, withPermits(cmdRelock(1, 4, "s", 1), 3), OK)
	wantGrants(t, sem, "s", grantRow{lease: 1, token: 2})
}
