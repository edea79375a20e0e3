package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// cmdRelock is cmdAcquire (waiting) of lease l's call r that first releases
// its grant of name with token.
func cmdRelock(l, r byte, name string, token uint64) Command {
	c := cmdAcquire(l, r, name, true)
	c.ReleaseToken = token
	return c
}

// TestRelock: every outcome and refusal of a relock (an Acquire with
// ReleaseToken). Refusals must leave the state as it was (checkApply).
func TestRelock(t *testing.T) {
	held := []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdAcquire(1, 4, "a", false)} // lease 1 holds a (token 1)
	queued := append(slices.Clone(held), cmdAcquire(2, 5, "a", true), cmdAcquire(3, 6, "a", true))     // 2 then 3 wait
	for _, tc := range []applyCase{
		{name: "nobody waits: granted again at once with a new token", history: held, cmd: cmdRelock(1, 7, "a", 1), want: OK, token: 2,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "a", grantRow{lease: 1, token: 2})
				wantEvents(t, r, ev{Released, 1, 1}, ev{Granted, 1, 2})
				if r.LeaseNumber != 1 {
					t.Fatalf("lease number %d", r.LeaseNumber)
				}
			}},
		{name: "waiters are granted first and the caller joins the back of the queue", history: queued, cmd: cmdRelock(1, 7, "a", 1), want: Queued,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "a", grantRow{lease: 2, token: 2})
				if q := s.Queue("a"); len(q) != 2 || q[0].Number != 3 || q[1].Number != 1 {
					t.Fatalf("queue %+v, want leases 3 then 1", q)
				}
				wantEvents(t, r, ev{Released, 1, 1}, ev{Granted, 2, 2}, ev{WaitStarted, 1, 0})
			}},
		{name: "the caller is granted when its turn comes", history: append(slices.Clone(queued), cmdRelock(1, 7, "a", 1), cmdRelease(2, 8, "a")),
			cmd: cmdRelease(3, 9, "a"), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "a", grantRow{lease: 1, token: 4})
				if a, _ := s.Answer(id(1), 7, "a"); a.Code != OK || a.Token != 4 {
					t.Fatalf("the relock's answer %+v, want OK token 4", a)
				}
			}},
		{name: "a cancelled waiter is not granted", history: append(slices.Clone(queued), Command{Kind: KindCancelWait, Lease: id(2), Seq: 5, Name: "a"}),
			cmd: cmdRelock(1, 7, "a", 1), want: Queued,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "a", grantRow{lease: 3, token: 2})
				if q := s.Queue("a"); len(q) != 1 || q[0].Number != 1 {
					t.Fatalf("queue %+v, want lease 1", q)
				}
			}},
		{name: "an old token", history: append(slices.Clone(held), cmdRelease(1, 5, "a"), cmdAcquire(1, 6, "a", false)),
			cmd: cmdRelock(1, 7, "a", 1), want: NotHolder},
		{name: "a token of another lease", history: append(slices.Clone(held), cmdAcquire(2, 5, "b", false)),
			cmd: cmdRelock(1, 7, "b", 2), want: NotHolder},
		{name: "another lease's grant of a name the caller waits for", history: queued,
			cmd: cmdRelock(2, 7, "a", 1), want: NotHolder},
		{name: "a token never issued", history: held, cmd: cmdRelock(1, 7, "a", 9), want: NotHolder},
		{name: "a free name", history: held, cmd: cmdRelock(1, 7, "b", 1), want: NotHolder},
		{name: "an expired lease", history: append(slices.Clone(held), Command{Kind: KindExpire, Lease: id(1)}),
			cmd: cmdRelock(1, 7, "a", 1), want: LeaseNotFound},
		{name: "a force-released grant", history: append(slices.Clone(held), Command{Kind: KindForceRelease, RequestID: req(50), Name: "a", Token: 1}),
			cmd: cmdRelock(1, 7, "a", 1), want: NotHolder},
		{name: "a grant in lock-delay", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), withDelay(cmdAcquire(2, 3, "a", false), time.Second),
			{Kind: KindExpire, Lease: id(2)}}, cmd: cmdRelock(1, 7, "a", 1), want: NotHolder},
		{name: "another permit count", history: append(slices.Clone(held), cmdSem(1, 5, "s", false, 2)),
			cmd: withPermits(cmdRelock(1, 7, "s", 2), 3), want: PermitsMismatch},
		{name: "a semaphore permit: the freed slot goes to the waiter, the caller queues",
			history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdSem(1, 4, "s", false, 2), cmdSem(2, 5, "s", false, 2), cmdSem(3, 6, "s", true, 2)},
			cmd:     withPermits(cmdRelock(1, 7, "s", 1), 2), want: Queued,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "s", grantRow{lease: 3, token: 3}, grantRow{lease: 2, token: 2, slot: 1})
			}},
		{name: "a semaphore permit with a free slot: granted again at once",
			history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdSem(1, 4, "s", false, 3), cmdSem(2, 5, "s", false, 3)},
			cmd:     withPermits(cmdRelock(1, 7, "s", 1), 3), want: OK, token: 3,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "s", grantRow{lease: 1, token: 3}, grantRow{lease: 2, token: 2, slot: 1})
			}},
		{name: "a reader beside a reader, nobody waiting: granted again at once",
			history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdRead(1, 4, "rw", false), cmdRead(2, 5, "rw", false)},
			cmd:     shared(cmdRelock(1, 7, "rw", 1)), want: OK, token: 3},
		{name: "a reader with a writer waiting queues behind the writer",
			history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdRead(1, 4, "rw", false), cmdRead(2, 5, "rw", false), cmdAcquire(3, 6, "rw", true)},
			cmd:     shared(cmdRelock(1, 7, "rw", 1)), want: Queued,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "rw", grantRow{lease: 2, token: 2, shared: true})
				if q := s.Queue("rw"); len(q) != 2 || q[0].Number != 3 || q[1].Number != 1 {
					t.Fatalf("queue %+v, want the writer (3) then the reader (1)", q)
				}
			}},
		{name: "a writer relocks as a reader (a new mode, as a release then an acquire)", history: held,
			cmd: shared(cmdRelock(1, 7, "a", 1)), want: OK, token: 2,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "a", grantRow{lease: 1, token: 2, shared: true})
			}},
		{name: "lock-delay of the new grant is the relock's", history: held,
			cmd: withDelay(cmdRelock(1, 7, "a", 1), 2*time.Second), want: OK, token: 2,
			check: func(t *testing.T, s *State, r Result) {
				if r := s.Apply(&Command{Kind: KindExpire, Lease: id(1)}); !hasDelay(r, 2*time.Second) {
					t.Fatalf("expiry after the relock: %+v, want a 2s lock-delay", r.Events)
				}
			}},
		{name: "a relock that does not wait", history: held, cmd: noWait(cmdRelock(1, 7, "a", 1)), want: Invalid},
		{name: "a relock with a once-per window", history: held, cmd: withOncePer(cmdRelock(1, 7, "a", 1), time.Hour), want: Invalid},
		{name: "a release with a release token", history: held, cmd: withReleaseToken(cmdRelease(1, 7, "a"), 1), want: Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) { checkApply(t, tc) })
	}
}

// TestRelockRetried: a retried relock (same request id and call number)
// returns the first outcome and never releases or grants again, whatever
// happened in between; a late duplicate after the acknowledgement is
// refused (Answered) and changes nothing.
func TestRelockRetried(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between []Command
		want    Code
		token   uint64
	}{
		{"granted, still held", nil, OK, 2},
		{"granted, released since", []Command{cmdRelease(1, 8, "a")}, Ended, 2},
		{"granted, then lease 2 holds the lock", []Command{cmdRelease(1, 8, "a"), cmdAcquire(2, 9, "a", false)}, Ended, 2},
		{"granted, then relocked again", []Command{cmdRelock(1, 8, "a", 2)}, Ended, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := withHistory(t, []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 4, "a", false), cmdRelock(1, 7, "a", 1)})
			for i := range tc.between {
				s.Apply(&tc.between[i])
			}
			before, counter := withoutCalls(s), s.Token()
			retry := cmdRelock(1, 7, "a", 1)
			r := s.Apply(&retry)
			if r.Code != tc.want || r.Token != tc.token {
				t.Fatalf("retry: %v token %d, want %v token %d", r.Code, r.Token, tc.want, tc.token)
			}
			if !bytes.Equal(before, withoutCalls(s)) || s.Token() != counter || len(r.Events) != 0 {
				t.Fatalf("the retry acted again: events %+v, counter %d → %d", r.Events, counter, s.Token())
			}
		})
	}
	t.Run("queued, retried while queued and after the grant", func(t *testing.T) {
		s := withHistory(t, []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 4, "a", false), cmdAcquire(2, 5, "a", true), cmdRelock(1, 7, "a", 1)})
		retry := cmdRelock(1, 7, "a", 1)
		before := withoutCalls(s)
		if r := s.Apply(&retry); r.Code != Queued || !bytes.Equal(before, withoutCalls(s)) {
			t.Fatalf("retry while queued: %v, or it acted", r.Code)
		}
		mustCode(t, s, cmdRelease(2, 5+1, "a"), OK) // lease 2 releases: lease 1 is granted token 3
		retry = cmdRelock(1, 7, "a", 1)
		if r := s.Apply(&retry); r.Code != OK || r.Token != 3 {
			t.Fatalf("retry after the grant: %v token %d, want OK 3", r.Code, r.Token)
		}
		wantGrants(t, s, "a", grantRow{lease: 1, token: 3})
	})
	t.Run("a late duplicate after the acknowledgement", func(t *testing.T) {
		s := withHistory(t, []Command{cmdCreate(1, 1), cmdAcquire(1, 4, "a", false), cmdRelock(1, 7, "a", 1)})
		next := cmdAcquire(1, 8, "b", false)
		next.Ack, next.Open = 8, nil // the client has every answer below 8
		mustCode(t, s, next, OK)
		before := s.Marshal(nil)
		late := cmdRelock(1, 7, "a", 1)
		if r := s.Apply(&late); r.Code != Answered || !bytes.Equal(before, s.Marshal(nil)) {
			t.Fatalf("late duplicate: %v, or it changed the state", r.Code)
		}
	})
	t.Run("a refusal is remembered: the retry is refused too, though the name is held now", func(t *testing.T) {
		s := withHistory(t, []Command{cmdCreate(1, 1), cmdAcquire(1, 4, "a", false)})
		stale := cmdRelock(1, 7, "a", 5)
		mustCode(t, s, stale, NotHolder)
		mustCode(t, s, cmdRelock(1, 7, "a", 5), NotHolder)
		wantGrants(t, s, "a", grantRow{lease: 1, token: 1})
	})
}

// TestRelockRacesForceRelease: an admin's ForceRelease and the holder's
// relock of the same grant, in both orders. Whichever applies first wins;
// the other finds the grant gone and changes nothing; the waiter is granted
// once, and no token is granted twice.
func TestRelockRacesForceRelease(t *testing.T) {
	history := []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 4, "a", false), cmdAcquire(2, 5, "a", true)}
	force := Command{Kind: KindForceRelease, RequestID: req(60), Name: "a", Token: 1}
	t.Run("relock first", func(t *testing.T) {
		s := withHistory(t, history)
		mustCode(t, s, cmdRelock(1, 7, "a", 1), Queued) // lease 2 granted token 2, lease 1 waits
		mustCode(t, s, force, Ended)                    // token 1 is gone: lease 2's grant is untouched
		wantGrants(t, s, "a", grantRow{lease: 2, token: 2})
		if q := s.Queue("a"); len(q) != 1 || q[0].Number != 1 {
			t.Fatalf("queue %+v", q)
		}
	})
	t.Run("force-release first", func(t *testing.T) {
		s := withHistory(t, history)
		mustCode(t, s, force, OK)                          // lease 2 granted token 2
		mustCode(t, s, cmdRelock(1, 7, "a", 1), NotHolder) // nothing changes: lease 1 does not join the queue
		wantGrants(t, s, "a", grantRow{lease: 2, token: 2})
		if q := s.Queue("a"); len(q) != 0 {
			t.Fatalf("queue %+v, want empty", q)
		}
	})
}

// TestReleaseHandsOffInTheSameCommand pins what a relock builds on: a
// Release grants the next waiter in the same command (one log entry), not
// in a later one the leader proposes.
func TestReleaseHandsOffInTheSameCommand(t *testing.T) {
	s := withHistory(t, []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(2, 4, "a", true)})
	r := s.Apply(ptr(cmdRelease(1, 5, "a")))
	wantEvents(t, r, ev{Released, 1, 1}, ev{Granted, 2, 2})
	if a, _ := s.Answer(id(2), 4, "a"); a.Code != OK || a.Token != 2 {
		t.Fatalf("the waiter's answer %+v, want OK token 2", a)
	}
}

// TestRelockEquivalence (property): a relock is a Release followed by an
// Acquire, observably for every other lease: from any reachable state, the
// relock of a grant some lease holds gives the same state (but for the
// memory of the caller's calls), the same events (but the caller's call
// numbers) and the same answer as the Release then the Acquire; tokens only
// grow; a relock of a grant the lease does not hold changes nothing. Other
// leases are queued for the name first most of the time.
func TestRelockEquivalence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New()
		for i, n := 0, rapid.IntRange(0, 80).Draw(t, "n"); i < n; i++ {
			var c Command
			if rapid.Bool().Draw(t, "modes") {
				c = genModeCommand(t)
			} else {
				c = genCommand(t)
			}
			s.Apply(&c)
		}
		type held struct {
			lease   LeaseID
			name    string
			token   uint64
			permits uint32
		}
		var grants []held
		for _, k := range s.Locks() {
			for _, g := range k.Grants {
				if !g.Delayed {
					grants = append(grants, held{lease: g.Holder, name: k.Name, token: g.Token, permits: k.Permits})
				}
			}
		}
		if len(grants) == 0 {
			t.Skip("no grant held")
		}
		g := rapid.SampledFrom(grants).Draw(t, "grant")
		// Others queue for it first, most of the time: the hand-off is what
		// the relock must get right.
		var others []LeaseID
		for id := range s.leases {
			if id != g.lease {
				others = append(others, id)
			}
		}
		slices.SortFunc(others, func(a, b LeaseID) int { return bytes.Compare(a[:], b[:]) })
		for i, n := 0, rapid.IntRange(0, 3).Draw(t, "waiters"); i < n && len(others) > 0; i++ {
			o := s.leases[rapid.SampledFrom(others).Draw(t, "waiter")]
			w := Command{Kind: KindAcquire, RequestID: RequestID{0xdd, byte(i)}, Lease: o.id, Seq: o.calls.top + 1, Ack: o.calls.top + 1, Name: g.name, Wait: true}
			if g.permits > 1 {
				w.Permits = g.permits
			} else {
				w.Shared = rapid.Bool().Draw(t, "waiterShared")
			}
			s.Apply(&w)
		}
		l := s.leases[g.lease]
		seq := l.calls.top + 1 // a call number the lease never used
		relock := Command{Kind: KindAcquire, RequestID: RequestID{0xee, 1}, Lease: g.lease, Seq: seq, Ack: seq, Name: g.name, Wait: true,
			LockDelay: time.Duration(rapid.IntRange(0, 1).Draw(t, "delay")) * time.Second, ReleaseToken: g.token}
		if g.permits > 1 {
			relock.Permits = g.permits
		} else {
			relock.Shared = rapid.Bool().Draw(t, "shared")
		}
		if rapid.IntRange(0, 4).Draw(t, "stale") == 0 {
			relock.ReleaseToken = s.Token() + 1 // never issued: refused, nothing changes
		}
		one, err := Unmarshal(s.Marshal(nil))
		if err != nil {
			t.Fatal(err)
		}
		two, _ := Unmarshal(s.Marshal(nil))
		before := withoutCalls(one)
		r := one.Apply(&relock)

		if relock.ReleaseToken != g.token {
			if r.Code != NotHolder || !bytes.Equal(before, withoutCalls(one)) || one.Token() != s.Token() {
				t.Fatalf("relock of a grant not held: %v, or it changed the state", r.Code)
			}
			return
		}
		release := Command{Kind: KindRelease, RequestID: RequestID{0xee, 2}, Lease: g.lease, Seq: seq, Ack: seq, Name: g.name}
		acquire := relock
		acquire.ReleaseToken, acquire.RequestID, acquire.Seq, acquire.Ack = 0, RequestID{0xee, 3}, seq+1, seq+1
		rr := two.Apply(&release)
		ra := two.Apply(&acquire)
		if rr.Code != OK {
			t.Fatalf("release of a held grant: %v", rr.Code)
		}
		if r.Code != ra.Code || r.Token != ra.Token || r.Slot != ra.Slot || r.Shared != ra.Shared {
			t.Fatalf("relock answered %v token %d slot %d; release+acquire %v token %d slot %d", r.Code, r.Token, r.Slot, ra.Code, ra.Token, ra.Slot)
		}
		if r.Code != OK && r.Code != Queued {
			t.Fatalf("a relock of a held grant answered %v", r.Code)
		}
		bySeq := func(events []Event) []Event {
			out := slices.Clone(events)
			for i := range out {
				out[i].Seq = 0
			}
			return out
		}
		if want := append(bySeq(rr.Events), bySeq(ra.Events)...); !reflect.DeepEqual(bySeq(r.Events), want) {
			t.Fatalf("relock events %+v\nrelease+acquire %+v", r.Events, want)
		}
		if !bytes.Equal(withoutCalls(one), withoutCalls(two)) {
			t.Fatal("the relock and the release+acquire reach different states")
		}
		if one.Token() < s.Token() || (r.Code == OK && r.Token <= g.token) {
			t.Fatalf("tokens went back: counter %d → %d, new grant %d after %d", s.Token(), one.Token(), r.Token, g.token)
		}
		checkInvariants(t, one)
	})
}

// TestRelockEntryBytes: a relock is written in version 6 (release token
// uvarint after shared); a version-6 entry without one, and a relock in an
// older version, are refused.
func TestRelockEntryBytes(t *testing.T) {
	acq := cat([]byte{5, 7}, rep(0, 15), []byte{9}, rep(0, 15), []byte{3, 3, 0, 1, 'a', 1, 0}) // ids, seq 3, ack 3, no open, name, wait, lock-delay
	cmd := Command{Kind: KindAcquire, RequestID: RequestID{7}, Lease: LeaseID{9}, Seq: 3, Ack: 3, Name: "a", Wait: true, ReleaseToken: 300}
	want := cat([]byte{6, 1}, acq, []byte{0, 0, 0, 0xac, 0x02}) // once-per 0, permits 0, shared 0, release token 300
	if got := EncodeBatch(nil, []Command{cmd}); !bytes.Equal(got, want) {
		t.Fatalf("EncodeBatch:\n got %x\nwant %x", got, want)
	}
	back, err := DecodeBatch(want)
	if err != nil || len(back) != 1 || !reflect.DeepEqual(back[0], cmd) {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	// The other commands of a version-6 entry keep their fields.
	mixed := []Command{cmdCreate(1, 1), cmdSem(1, 2, "s", true, 3), cmd}
	if back, err := DecodeBatch(EncodeBatch(nil, mixed)); err != nil || !reflect.DeepEqual(back, mixed) {
		t.Fatalf("mixed batch: %+v, %v", back, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"version 6 without a release token", cat([]byte{6, 1}, acq, []byte{0, 0, 0, 0})},
		{"a relock that does not wait", cat([]byte{6, 1}, acq[:len(acq)-2], []byte{0, 0, 0, 0, 0, 1})},
		{"non-canonical release token", cat([]byte{6, 1}, acq, []byte{0, 0, 0, 0x81, 0x00})},
		{"truncated release token", cat([]byte{6, 1}, acq, []byte{0, 0, 0})},
		{"version 7", cat([]byte{7, 1}, acq, []byte{0, 0, 0, 1})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmds, err := DecodeBatch(tc.b)
			if !errors.Is(err, ErrCorrupt) || cmds != nil {
				t.Fatalf("DecodeBatch(%x) = %d commands, %v; want ErrCorrupt", tc.b, len(cmds), err)
			}
		})
	}
	// An entry without a relock is written as before.
	plain := cmd
	plain.ReleaseToken = 0
	if got := EncodeBatch(nil, []Command{plain}); got[0] != 2 {
		t.Fatalf("an Acquire without a release token is written in version %d, want 2", got[0])
	}
}

type ev struct {
	kind  EventKind
	lease byte
	token uint64
}

// wantEvents checks r's events, in order, by kind, lease and token.
func wantEvents(t *testing.T, r Result, want ...ev) {
	t.Helper()
	var got []ev
	for _, e := range r.Events {
		got = append(got, ev{e.Kind, e.Lease[0], e.Token})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
}

func hasDelay(r Result, d time.Duration) bool {
	return slices.ContainsFunc(r.Events, func(e Event) bool { return e.Kind == DelayStarted && e.Delay == d })
}

func withPermits(c Command, n uint32) Command        { c.Permits = n; return c }
func shared(c Command) Command                       { c.Shared = true; return c }
func noWait(c Command) Command                       { c.Wait = false; return c }
func withOncePer(c Command, d time.Duration) Command { c.OncePer = d; return c }
func withReleaseToken(c Command, tok uint64) Command { c.ReleaseToken = tok; return c }

// TestRelockSnapshotVersion: a lease that remembers a relock refused
// NotHolder is written in snapshot version 7 (an older fence refuses an
// Acquire answered NotHolder); the same bytes labelled version 6 are
// refused as non-canonical; a state without one is written as before.
func TestRelockSnapshotVersion(t *testing.T) {
	history := []Command{cmdCreate(1, 1), cmdAcquire(1, 4, "a", false)}
	s := withHistory(t, history)
	if v := s.Marshal(nil)[0]; v != 3 {
		t.Fatalf("a plain state in snapshot version %d, want 3", v)
	}
	mustCode(t, s, cmdRelock(1, 7, "a", 1), OK) // a relock granted: remembered OK, nothing new
	if v := s.Marshal(nil)[0]; v != 3 {
		t.Fatalf("a state after a granted relock in snapshot version %d, want 3", v)
	}
	mustCode(t, s, cmdRelock(1, 8, "a", 1), NotHolder) // token 1 ended: remembered NotHolder
	b := s.Marshal(nil)
	if b[0] != 7 {
		t.Fatalf("snapshot version %d, want 7", b[0])
	}
	back, err := Unmarshal(b)
	if err != nil || !bytes.Equal(back.Marshal(nil), b) {
		t.Fatalf("round trip: %v", err)
	}
	if r := back.Apply(ptr(cmdRelock(1, 8, "a", 1))); r.Code != NotHolder {
		t.Fatalf("the restored state answers the retry %v, want NotHolder", r.Code)
	}
	b[0] = 6
	if _, err := Unmarshal(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a version-6 snapshot with an Acquire answered NotHolder: %v, want ErrCorrupt", err)
	}
}
