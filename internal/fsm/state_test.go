package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func id(b byte) LeaseID    { return LeaseID{b} }
func req(b byte) RequestID { return RequestID{b} }
func cmdCreate(l, r byte) Command {
	return Command{Kind: KindCreateLease, RequestID: req(r), Lease: id(l), TTL: 10 * time.Second, Owner: "w" + string('0'+l)}
}

// cmdAcquire and cmdRelease number the call r within its lease and give it
// request id r: the same r is a retry of the same call. They acknowledge
// nothing (every earlier call open), so the tests can retry any call.
func cmdAcquire(l, r byte, name string, wait bool) Command {
	return Command{Kind: KindAcquire, RequestID: req(r), Lease: id(l), Seq: uint64(r), Ack: 1, Open: allOpen(uint64(r)), Name: name, Wait: wait}
}
func cmdRelease(l, r byte, name string) Command {
	return Command{Kind: KindRelease, RequestID: req(r), Lease: id(l), Seq: uint64(r), Ack: 1, Open: allOpen(uint64(r)), Name: name}
}

// allOpen lists calls 2…seq−1: with ack 1, a request that acknowledges nothing.
func allOpen(seq uint64) []uint64 {
	var o []uint64
	for n := uint64(2); n < seq; n++ {
		o = append(o, n)
	}
	return o
}
func cmdPut(r byte, key, value string, token uint64) Command {
	return Command{Kind: KindPut, RequestID: req(r), Name: key, Value: []byte(value), Token: token}
}

// TestApply runs each command against a prepared history and checks the
// result and what changed. Every refusal must leave the state byte-identical.
func TestApply(t *testing.T) {
	delayed := Command{Kind: KindAcquire, RequestID: req(20), Lease: id(1), Seq: 20, Ack: 1, Open: allOpen(20), Name: "a", LockDelay: 5 * time.Second}
	tests := []applyCase{
		{name: "create lease", cmd: cmdCreate(1, 1), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if r.LeaseNumber != 1 || s.NumLeases() != 1 {
					t.Fatalf("lease number %d, leases %d", r.LeaseNumber, s.NumLeases())
				}
			}},
		{name: "create lease retried returns the first lease", history: []Command{cmdCreate(1, 1)},
			cmd: Command{Kind: KindCreateLease, RequestID: req(1), Lease: id(2), TTL: time.Second}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if r.LeaseNumber != 1 || s.NumLeases() != 1 || r.TTL != 10*time.Second {
					t.Fatalf("retry made a second lease: %+v", r)
				}
			}},
		{name: "create lease with an id in use", history: []Command{cmdCreate(1, 1)}, cmd: cmdCreate(1, 2), want: Invalid},
		{name: "create lease ttl too long", cmd: Command{Kind: KindCreateLease, RequestID: req(1), Lease: id(1), TTL: 25 * time.Hour}, want: Invalid},
		{name: "create lease without id", cmd: Command{Kind: KindCreateLease, RequestID: req(1), TTL: time.Second}, want: Invalid},
		{name: "create lease with control char owner", cmd: Command{Kind: KindCreateLease, Lease: id(1), TTL: time.Second, Owner: "a\nb"}, want: Invalid},
		{name: "renew", history: []Command{cmdCreate(1, 1), {Kind: KindTick, Elapsed: time.Second}},
			cmd: Command{Kind: KindRenew, Lease: id(1)}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				l, _ := s.Lease(id(1))
				if l.Renewals != 1 || l.RenewedAt != time.Second {
					t.Fatalf("renewals %d at %v", l.Renewals, l.RenewedAt)
				}
			}},
		{name: "renew unknown lease", cmd: Command{Kind: KindRenew, Lease: id(9)}, want: LeaseNotFound},
		{name: "acquire free lock", history: []Command{cmdCreate(1, 1)}, cmd: cmdAcquire(1, 2, "a", false), want: OK, token: 1},
		{name: "acquire with unknown lease", cmd: cmdAcquire(1, 2, "a", false), want: LeaseNotFound},
		{name: "acquire held lock without waiting", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false)},
			cmd: cmdAcquire(2, 4, "a", false), want: LockHeld, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if r.LeaseNumber != 1 || r.Owner != "w1" {
					t.Fatalf("holder not reported: %+v", r)
				}
			}},
		{name: "acquire held lock waiting", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false)},
			cmd: cmdAcquire(2, 4, "a", true), want: Queued,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); len(k.Waiters) != 1 || k.Waiters[0] != id(2) {
					t.Fatalf("waiters %v", k.Waiters)
				}
			}},
		{name: "acquire retried after grant returns the same token", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "a", false)},
			cmd: cmdAcquire(1, 3, "a", false), want: OK, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if s.Token() != 1 {
					t.Fatalf("retry granted again: counter %d", s.Token())
				}
			}},
		{name: "acquire retried after grant and release answers ended, never ok", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "a", false), cmdRelease(1, 4, "a")},
			cmd: cmdAcquire(1, 3, "a", false), want: Ended, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if _, held := s.Lock("a"); held || s.Token() != 1 {
					t.Fatal("a retried acquire acted twice")
				}
			}},
		{name: "acquire retried while queued stays queued once", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(2, 4, "a", true)},
			cmd: cmdAcquire(2, 4, "a", true), want: Queued,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); len(k.Waiters) != 1 {
					t.Fatalf("queued twice: %v", k.Waiters)
				}
			}},
		{name: "acquire a lock the lease already holds, new request", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "a", false)},
			cmd: cmdAcquire(1, 4, "a", true), want: AlreadyHeld, token: 1},
		{name: "acquire a lock the lease already waits for, new request", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(2, 4, "a", true)},
			cmd: cmdAcquire(2, 5, "a", true), want: AlreadyHeld},
		{name: "acquire with bad name", history: []Command{cmdCreate(1, 1)}, cmd: cmdAcquire(1, 2, "", false), want: Invalid},
		{name: "acquire with lock-delay too long", history: []Command{cmdCreate(1, 1)},
			cmd: Command{Kind: KindAcquire, RequestID: req(2), Lease: id(1), Seq: 2, Ack: 1, Name: "a", LockDelay: time.Hour}, want: Invalid},
		{name: "acquire without an ack", history: []Command{cmdCreate(1, 1)},
			cmd: Command{Kind: KindAcquire, RequestID: req(2), Lease: id(1), Seq: 2, Name: "a"}, want: Invalid},
		{name: "acquire without a request id", history: []Command{cmdCreate(1, 1)},
			cmd: Command{Kind: KindAcquire, Lease: id(1), Seq: 2, Ack: 1, Name: "a"}, want: Invalid},
		{name: "acquire without a call number", history: []Command{cmdCreate(1, 1)},
			cmd: Command{Kind: KindAcquire, RequestID: req(2), Lease: id(1), Name: "a"}, want: Invalid},
		{name: "acquire acknowledging itself ahead", history: []Command{cmdCreate(1, 1)},
			cmd: Command{Kind: KindAcquire, RequestID: req(2), Lease: id(1), Seq: 2, Ack: 3, Name: "a"}, want: Invalid},
		{name: "acquire reusing a call number with another request id", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 2, "a", false)},
			cmd: Command{Kind: KindAcquire, RequestID: req(9), Lease: id(1), Seq: 2, Ack: 1, Name: "b"}, want: Invalid},
		{name: "acquire below the acknowledged floor is refused, not executed", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 2, "a", false), cmdRelease(1, 3, "a"),
			{Kind: KindAcquire, RequestID: req(4), Lease: id(1), Seq: 4, Ack: 4, Name: "b"}},
			cmd: cmdAcquire(1, 2, "a", false), want: Answered,
			check: func(t *testing.T, s *State, r Result) {
				if s.Token() != 2 { // a and b granted once each
					t.Fatalf("a late duplicate was executed: counter %d", s.Token())
				}
			}},
		{name: "create lease without a request id", cmd: Command{Kind: KindCreateLease, Lease: id(1), TTL: time.Second}, want: Invalid},
		{name: "release hands the lock to the first waiter", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3),
			cmdAcquire(1, 4, "a", false), cmdAcquire(2, 5, "a", true), cmdAcquire(3, 6, "a", true)},
			cmd: cmdRelease(1, 7, "a"), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				k, _ := s.Lock("a")
				if k.Holder != id(2) || k.Token != 2 || len(k.Waiters) != 1 || k.Waiters[0] != id(3) {
					t.Fatalf("handoff wrong: %+v", k)
				}
				if !hasEvent(r, Granted, id(2), 2) {
					t.Fatalf("no Granted event: %+v", r.Events)
				}
			}},
		{name: "release by a lease that does not hold", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false)},
			cmd: cmdRelease(2, 4, "a"), want: NotHolder},
		{name: "release of a free lock", history: []Command{cmdCreate(1, 1)}, cmd: cmdRelease(1, 4, "a"), want: NotHolder},
		{name: "release retried answers ok once", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "a", false), cmdRelease(1, 4, "a")},
			cmd: cmdRelease(1, 4, "a"), want: OK},
		{name: "release retried after the lease re-acquired releases nothing", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "a", false), cmdRelease(1, 4, "a"), cmdAcquire(1, 5, "a", false)},
			cmd: cmdRelease(1, 4, "a"), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); k.Holder != id(1) || k.Token != 2 {
					t.Fatalf("the retry released the new grant: %+v", k)
				}
			}},
		{name: "force-release ends the named grant only", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(1, 4, "b", false), cmdAcquire(2, 5, "a", true)},
			cmd: Command{Kind: KindForceRelease, RequestID: req(9), Name: "a", Token: 1}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				a, _ := s.Lock("a")
				b, _ := s.Lock("b")
				l, alive := s.Lease(id(1))
				if a.Holder != id(2) || a.Token != 3 || b.Holder != id(1) || !alive || len(l.Holds) != 1 {
					t.Fatalf("force-release: a=%+v b=%+v lease alive %v holds %v", a, b, alive, l.Holds)
				}
			}},
		{name: "force-release of a grant that ended", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdRelease(1, 4, "a"), cmdAcquire(2, 5, "a", false)},
			cmd: Command{Kind: KindForceRelease, RequestID: req(9), Name: "a", Token: 1}, want: Ended},
		{name: "force-release without a token", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "a", false)},
			cmd: Command{Kind: KindForceRelease, RequestID: req(9), Name: "a"}, want: Invalid},
		{name: "renew reports the tokens held", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "b", false), cmdAcquire(1, 4, "a", false)},
			cmd: Command{Kind: KindRenew, Lease: id(1)}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if !slices.Equal(r.Held, []uint64{2, 1}) {
					t.Fatalf("held %v, want [2 1] (in name order)", r.Held)
				}
			}},
		{name: "revoke releases at once, no delay", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), delayed, cmdAcquire(2, 5, "a", true)},
			cmd: Command{Kind: KindRevoke, RequestID: req(9), Lease: id(1)}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); k.Holder != id(2) || k.Delayed {
					t.Fatalf("revoke did not hand off: %+v", k)
				}
				if len(r.Released) != 1 || r.Released[0] != "a" {
					t.Fatalf("released %v", r.Released)
				}
			}},
		{name: "revoke unknown lease", cmd: Command{Kind: KindRevoke, RequestID: req(9), Lease: id(1)}, want: LeaseNotFound},
		{name: "expire enters lock-delay", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), delayed, cmdAcquire(2, 5, "a", true)},
			cmd: Command{Kind: KindExpire, Lease: id(1)}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				k, _ := s.Lock("a")
				if !k.Holder.IsZero() || !k.Delayed || len(k.Waiters) != 1 {
					t.Fatalf("expire: %+v", k)
				}
				if _, ok := s.Lease(id(1)); ok {
					t.Fatal("expired lease still lives")
				}
			}},
		{name: "expire without lock-delay hands off at once", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(2, 5, "a", true)},
			cmd: Command{Kind: KindExpire, Lease: id(1)}, want: OK, token: 0,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); k.Holder != id(2) || k.Token != 2 {
					t.Fatalf("no handoff: %+v", k)
				}
			}},
		{name: "expire loses to a later renewal", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "a", false), {Kind: KindRenew, Lease: id(1)}},
			cmd: Command{Kind: KindExpire, Lease: id(1)}, want: Renewed},
		{name: "expire unknown lease", cmd: Command{Kind: KindExpire, Lease: id(1)}, want: LeaseNotFound},
		{name: "expired waiter leaves the queue", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(2, 4, "a", true)},
			cmd: Command{Kind: KindExpire, Lease: id(2)}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); len(k.Waiters) != 0 || k.Holder != id(1) {
					t.Fatalf("waiter stayed: %+v", k)
				}
			}},
		{name: "grant-next after lock-delay skips nobody alive and grants the first waiter", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3),
			delayed, cmdAcquire(2, 5, "a", true), cmdAcquire(3, 6, "a", true), {Kind: KindExpire, Lease: id(1)}, {Kind: KindExpire, Lease: id(2)}},
			cmd: Command{Kind: KindGrantNext, Name: "a", Token: 1}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); k.Holder != id(3) || k.Delayed {
					t.Fatalf("grant-next: %+v", k)
				}
			}},
		{name: "grant-next with nobody waiting frees the lock", history: []Command{cmdCreate(1, 1), delayed, {Kind: KindExpire, Lease: id(1)}},
			cmd: Command{Kind: KindGrantNext, Name: "a", Token: 1}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if _, ok := s.Lock("a"); ok {
					t.Fatal("idle lock kept")
				}
			}},
		{name: "grant-next on a lock not delayed", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 3, "a", false)},
			cmd: Command{Kind: KindGrantNext, Name: "a", Token: 1}, want: NotWaiting},
		{name: "grant-next of another delay", history: []Command{cmdCreate(1, 1), delayed, {Kind: KindExpire, Lease: id(1)}},
			cmd: Command{Kind: KindGrantNext, Name: "a", Token: 7}, want: NotWaiting},
		{name: "try-acquire a delayed lock is refused", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), delayed, {Kind: KindExpire, Lease: id(1)}},
			cmd: cmdAcquire(2, 5, "a", false), want: LockHeld, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if !r.Delayed {
					t.Fatal("delay not reported")
				}
			}},
		{name: "cancel-wait leaves the queue", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(2, 4, "a", true)},
			cmd: Command{Kind: KindCancelWait, Lease: id(2), Seq: 4, Name: "a"}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if l, _ := s.Lease(id(2)); len(l.Waits) != 0 {
					t.Fatalf("still waits: %v", l.Waits)
				}
				retry := cmdAcquire(2, 4, "a", true)
				if r := s.Apply(&retry); r.Code != Cancelled {
					t.Fatalf("retry of the cancelled wait: %v", r.Code)
				}
			}},
		{name: "cancel-wait of another call of the lease", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(2, 4, "a", true)},
			cmd: Command{Kind: KindCancelWait, Lease: id(2), Seq: 3, Name: "a"}, want: NotWaiting},
		{name: "cancel-wait when not waiting", history: []Command{cmdCreate(1, 1)},
			cmd: Command{Kind: KindCancelWait, Lease: id(1), Seq: 1, Name: "a"}, want: NotWaiting},
		{name: "put with a granted token", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 2, "a", false)},
			cmd: cmdPut(3, "k", "v", 1), want: OK, token: 1},
		{name: "put with an equal token again", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 2, "a", false), cmdPut(3, "k", "v", 1)},
			cmd: cmdPut(4, "k", "w", 1), want: OK, token: 1},
		{name: "put with a stale token", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 2, "a", false), cmdAcquire(1, 3, "b", false), cmdPut(4, "k", "new", 2)},
			cmd: cmdPut(5, "k", "old", 1), want: Stale, token: 2,
			check: func(t *testing.T, s *State, r Result) {
				if v, tok, _ := s.Get("k"); string(v) != "new" || tok != 2 {
					t.Fatalf("stale write landed: %q %d", v, tok)
				}
			}},
		{name: "put with a token never issued", cmd: cmdPut(1, "k", "", 7), want: Invalid},
		{name: "put with token 0", cmd: cmdPut(1, "k", "", 0), want: Invalid},
		{name: "put without a request id", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 2, "a", false)},
			cmd: Command{Kind: KindPut, Name: "k", Token: 1}, want: Invalid},
		{name: "put with a value too large", history: []Command{cmdCreate(1, 1), cmdAcquire(1, 2, "a", false)},
			cmd: Command{Kind: KindPut, RequestID: req(3), Name: "k", Token: 1, Value: make([]byte, MaxValueLen+1)}, want: Invalid},
		{name: "tick advances the clock", cmd: Command{Kind: KindTick, Elapsed: 100 * time.Millisecond}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if s.Clock() != 100*time.Millisecond {
					t.Fatalf("clock %v", s.Clock())
				}
			}},
		{name: "set-node records a client address", cmd: Command{Kind: KindSetNode, Name: "n2", Addr: "127.0.0.1:7310"}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if a, ok := s.NodeAddr("n2"); !ok || a != "127.0.0.1:7310" {
					t.Fatalf("node address %q %v", a, ok)
				}
			}},
		{name: "set-node without an address", cmd: Command{Kind: KindSetNode, Name: "n2"}, want: Invalid},
		{name: "tick too long", cmd: Command{Kind: KindTick, Elapsed: time.Hour}, want: Invalid},
		{name: "command with a field of another kind", cmd: Command{Kind: KindTick, Elapsed: 1, Name: "x"}, want: Invalid},
		{name: "unknown kind", cmd: Command{Kind: 99}, want: Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkApply(t, tt)
		})
	}
}

// applyCase is a table test of Apply: cmd after history answers want (and
// token, if not 0); check looks further.
type applyCase struct {
	name    string
	history []Command
	cmd     Command
	want    Code
	token   uint64
	check   func(t *testing.T, s *State, r Result)
}

// checkApply applies tc.cmd after tc.history and checks its code and token,
// that a refusal changed nothing but the memory of answers (an invalid
// command nothing at all, with a reason), the invariants, and tc.check.
func checkApply(t *testing.T, tc applyCase) {
	t.Helper()
	history, cmd, want, token, check := tc.history, tc.cmd, tc.want, tc.token, tc.check
	s := withHistory(t, history)
	before, beforeSans := s.Marshal(nil), withoutCalls(s)
	r := s.Apply(&cmd)
	if r.Code != want {
		t.Fatalf("code %v (%s), want %v", r.Code, r.Reason, want)
	}
	if token != 0 && r.Token != token {
		t.Fatalf("token %d, want %d", r.Token, token)
	}
	if r.Code != OK && r.Code != Queued && string(withoutCalls(s)) != string(beforeSans) {
		t.Fatalf("refusal %v changed the state", r.Code)
	}
	if r.Code == Invalid && string(s.Marshal(nil)) != string(before) {
		t.Fatalf("invalid command changed the state")
	}
	if r.Code == Invalid && r.Reason == "" {
		t.Fatal("invalid without a reason")
	}
	checkInvariants(t, s)
	if check != nil {
		check(t, s, r)
	}
}

// withHistory is a new state with history applied, each command granted
// or queued (or, an Acquire with a once-per window, refused RanRecently;
// one with another permit count, PermitsMismatch).
func withHistory(t *testing.T, history []Command) *State {
	t.Helper()
	s := New()
	for i := range history {
		if r := s.Apply(&history[i]); r.Code != OK && r.Code != Queued && r.Code != RanRecently && r.Code != PermitsMismatch {
			t.Fatalf("history[%d] %v: %v %s", i, history[i].Kind, r.Code, r.Reason)
		}
	}
	return s
}

func hasEvent(r Result, kind EventKind, lease LeaseID, token uint64) bool {
	for _, e := range r.Events {
		if e.Kind == kind && e.Lease == lease && e.Token == token {
			return true
		}
	}
	return false
}

func TestValidName(t *testing.T) {
	for _, tt := range []struct {
		in, err string
	}{
		{"jobs/nightly", ""},
		{"ünïcødé ✓", ""},
		{strings.Repeat("x", 256), ""},
		{"", "empty"},
		{strings.Repeat("x", 257), "257 bytes"},
		{"a\x00b", "control character"},
		{"tab\there", "control character"},
		{"\xff\xfe", "UTF-8"},
		{"a\u0085b", "control character"},
	} {
		err := ValidName("lock name", tt.in)
		if (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ValidName(%q) = %v, want error containing %q", tt.in, err, tt.err)
		}
	}
}

func TestLocksAfter(t *testing.T) {
	s := New()
	c := cmdCreate(1, 1)
	s.Apply(&c)
	for i, name := range []string{"b", "d", "a", "c", "e"} {
		a := cmdAcquire(1, byte(10+i), name, false)
		s.Apply(&a)
	}
	names := func(v []LockView) (out string) {
		for _, l := range v {
			out += l.Name
		}
		return out
	}
	for _, tt := range []struct {
		after string
		limit int
		want  string
		more  bool
	}{
		{"", 2, "ab", true}, {"b", 2, "cd", true}, {"d", 2, "e", false}, {"bb", 10, "cde", false},
		{"e", 2, "", false}, {"", 5, "abcde", false}, {"", 0, "", true},
	} {
		page, more := s.LocksAfter(tt.after, tt.limit, nil)
		if names(page) != tt.want || more != tt.more {
			t.Errorf("LocksAfter(%q, %d) = %q, %v; want %q, %v", tt.after, tt.limit, names(page), more, tt.want, tt.more)
		}
	}
}

// TestQueue checks the queue a read shows: FIFO order of arrival (not of
// lease number), and a waiter that leaves (cancelled, revoked, granted)
// gone from it.
func TestQueue(t *testing.T) {
	s := New()
	apply := func(c Command) {
		t.Helper()
		if r := s.Apply(&c); r.Code != OK && r.Code != Queued {
			t.Fatalf("%v: %v %s", c.Kind, r.Code, r.Reason)
		}
	}
	for l := byte(1); l <= 4; l++ {
		apply(cmdCreate(l, l)) // lease numbers 1..4, owners w1..w4
	}
	apply(cmdAcquire(1, 10, "a", false))
	apply(cmdAcquire(3, 11, "a", true))
	apply(cmdRead(2, 12, "a", true)) // a reader: shown as one
	apply(cmdAcquire(4, 13, "a", true))
	check := func(want ...QueuedView) {
		t.Helper()
		if got := s.Queue("a"); !slices.Equal(got, want) {
			t.Fatalf("Queue(a) = %v, want %v", got, want)
		}
	}
	check(QueuedView{3, "w3", false}, QueuedView{2, "w2", true}, QueuedView{4, "w4", false})
	apply(Command{Kind: KindCancelWait, Lease: id(2), Seq: 12, Name: "a"})
	check(QueuedView{3, "w3", false}, QueuedView{4, "w4", false})
	apply(Command{Kind: KindRevoke, RequestID: req(20), Lease: id(3)})
	check(QueuedView{4, "w4", false})
	apply(cmdRelease(1, 14, "a")) // hands a to lease 4
	check()
	if v, _ := s.Lock("a"); v.HolderNum != 4 {
		t.Fatalf("holder %d, want 4", v.HolderNum)
	}
	if q := s.Queue("nobody-has-it"); q != nil {
		t.Fatalf("Queue of an unknown lock = %v", q)
	}
}
