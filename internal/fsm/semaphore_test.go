package fsm

import (
	"slices"
	"testing"
	"time"
)

// cmdSem is cmdAcquire of a permit of a semaphore of n permits.
func cmdSem(l, r byte, name string, wait bool, n uint32) Command {
	c := cmdAcquire(l, r, name, wait)
	c.Permits = n
	return c
}

// cmdRead is cmdAcquire of a shared (reader's) grant.
func cmdRead(l, r byte, name string, wait bool) Command {
	c := cmdAcquire(l, r, name, wait)
	c.Shared = true
	return c
}

// withDelay gives an Acquire a lock-delay.
func withDelay(c Command, d time.Duration) Command {
	c.LockDelay = d
	return c
}

// grants lists a lock's grants as (lease byte, token, slot, shared, delayed).
type grantRow struct {
	lease   byte
	token   uint64
	slot    uint32
	shared  bool
	delayed bool
}

func grantsOf(s *State, name string) []grantRow {
	k, ok := s.Lock(name)
	if !ok {
		return nil
	}
	var out []grantRow
	for _, g := range k.Grants {
		out = append(out, grantRow{g.Holder[0], g.Token, g.Slot, g.Shared, g.Delayed})
	}
	return out
}

func wantGrants(t *testing.T, s *State, name string, want ...grantRow) {
	t.Helper()
	if got := grantsOf(s, name); !slices.Equal(got, want) {
		t.Fatalf("grants of %q = %+v, want %+v", name, got, want)
	}
}

func expire(l byte) Command { return Command{Kind: KindExpire, Lease: id(l)} }

// threeHolders: leases 1–3 hold the three permits of "s" (tokens 1–3,
// slots 0–2), lease 4 exists.
func threeHolders() []Command {
	return []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdCreate(4, 4),
		cmdSem(1, 5, "s", false, 3), cmdSem(2, 6, "s", false, 3), cmdSem(3, 7, "s", false, 3)}
}

func TestSemaphore(t *testing.T) {
	two := []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdSem(1, 4, "s", false, 3), cmdSem(2, 5, "s", false, 3)}
	full := append(threeHolders(), cmdSem(4, 8, "s", true, 3))
	delayedTwo := []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3),
		withDelay(cmdSem(1, 4, "s", false, 3), 5*time.Second), withDelay(cmdSem(2, 5, "s", false, 3), 5*time.Second), expire(1)}
	tests := []applyCase{
		{name: "the first acquire makes a semaphore: slot 0", history: []Command{cmdCreate(1, 1)}, cmd: cmdSem(1, 2, "s", false, 3), want: OK, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("s"); k.Permits != 3 || r.Slot != 0 {
					t.Fatalf("permits %d, slot %d", k.Permits, r.Slot)
				}
				wantGrants(t, s, "s", grantRow{1, 1, 0, false, false})
			}},
		{name: "the next permit takes the lowest free slot", history: two, cmd: cmdSem(3, 6, "s", false, 3), want: OK, token: 3,
			check: func(t *testing.T, s *State, r Result) {
				if r.Slot != 2 || !hasEvent(r, Granted, id(3), 3) || r.Events[0].Slot != 2 {
					t.Fatalf("slot %d, events %+v", r.Slot, r.Events)
				}
			}},
		{name: "all permits held, no wait: refused, the first holder described", history: threeHolders(), cmd: cmdSem(4, 8, "s", false, 3),
			want: LockHeld, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if r.LeaseNumber != 1 || r.Owner != "w1" {
					t.Fatalf("holder %d %q", r.LeaseNumber, r.Owner)
				}
			}},
		{name: "all permits held, waiting: queued", history: threeHolders(), cmd: cmdSem(4, 8, "s", true, 3), want: Queued},
		{name: "a release hands its slot to the first waiter", history: full, cmd: cmdRelease(2, 9, "s"), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "s", grantRow{1, 1, 0, false, false}, grantRow{4, 4, 1, false, false}, grantRow{3, 3, 2, false, false})
				if a, _ := s.Answer(id(4), 8, "s"); a.Code != OK || a.Token != 4 || a.Slot != 1 {
					t.Fatalf("the waiter's answer %+v", a)
				}
			}},
		{name: "another permit count is refused", history: two, cmd: cmdSem(3, 6, "s", false, 2), want: PermitsMismatch,
			check: func(t *testing.T, s *State, r Result) {
				if r.Permits != 3 {
					t.Fatalf("permits %d, want 3", r.Permits)
				}
			}},
		{name: "a mutex acquire of a semaphore is refused", history: two, cmd: cmdAcquire(3, 6, "s", true), want: PermitsMismatch,
			check: func(t *testing.T, s *State, r Result) {
				if r.Permits != 3 {
					t.Fatalf("permits %d, want 3", r.Permits)
				}
			}},
		{name: "a semaphore acquire of a mutex is refused", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "m", false)},
			cmd: cmdSem(2, 4, "m", true, 2), want: PermitsMismatch,
			check: func(t *testing.T, s *State, r Result) {
				if r.Permits != 1 {
					t.Fatalf("permits %d, want 1", r.Permits)
				}
			}},
		{name: "a retried refusal recalls the count", history: append(two, cmdSem(3, 6, "s", false, 2)), cmd: cmdSem(3, 6, "s", false, 2),
			want: PermitsMismatch,
			check: func(t *testing.T, s *State, r Result) {
				if r.Permits != 3 || r.Token != 0 {
					t.Fatalf("recalled %+v", r)
				}
			}},
		{name: "an idle semaphore is forgotten: the next acquire sets the count",
			history: append(two, cmdRelease(1, 6, "s"), cmdRelease(2, 7, "s")), cmd: cmdSem(3, 8, "s", false, 2), want: OK, token: 3,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("s"); k.Permits != 2 || r.Slot != 0 {
					t.Fatalf("permits %d slot %d", k.Permits, r.Slot)
				}
			}},
		{name: "one permit count: 1 is not sent", history: []Command{cmdCreate(1, 1)}, cmd: cmdSem(1, 2, "s", false, 1), want: Invalid},
		{name: "too many permits", history: []Command{cmdCreate(1, 1)}, cmd: cmdSem(1, 2, "s", false, MaxPermits+1), want: Invalid},
		{name: "a lease holds one permit of a name", history: two, cmd: cmdSem(1, 6, "s", false, 3), want: AlreadyHeld, token: 1},
		{name: "a retried acquire recalls its slot", history: two, cmd: cmdSem(2, 5, "s", false, 3), want: OK, token: 2,
			check: func(t *testing.T, s *State, r Result) {
				if r.Slot != 1 {
					t.Fatalf("slot %d, want 1", r.Slot)
				}
			}},
		{name: "an expired permit stays delayed; the other slots serve", history: delayedTwo, cmd: cmdSem(3, 6, "s", false, 3), want: OK, token: 3,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "s", grantRow{0, 1, 0, false, true}, grantRow{2, 2, 1, false, false}, grantRow{3, 3, 2, false, false})
			}},
		{name: "an expiry with lock-delay says which slot", history: delayedTwo[:5], cmd: expire(1), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				i := slices.IndexFunc(r.Events, func(e Event) bool { return e.Kind == DelayStarted })
				if i < 0 || r.Events[i].Token != 1 || r.Events[i].Slot != 0 || r.Events[i].Delay != 5*time.Second {
					t.Fatalf("events %+v", r.Events)
				}
			}},
		{name: "grant-next ends one slot's delay and grants it",
			history: append(slices.Clone(delayedTwo), cmdSem(3, 6, "s", false, 3), cmdCreate(4, 4), cmdSem(4, 7, "s", true, 3)),
			cmd:     Command{Kind: KindGrantNext, Name: "s", Token: 1}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "s", grantRow{4, 4, 0, false, false}, grantRow{2, 2, 1, false, false}, grantRow{3, 3, 2, false, false})
			}},
		{name: "grant-next of a held permit's token does nothing", history: delayedTwo, cmd: Command{Kind: KindGrantNext, Name: "s", Token: 2},
			want: NotWaiting},
		{name: "force-release of one permit hands on that slot", history: full, cmd: Command{Kind: KindForceRelease, RequestID: req(9), Name: "s", Token: 3},
			want: OK, token: 3,
			check: func(t *testing.T, s *State, r Result) {
				if r.Slot != 2 || r.LeaseNumber != 3 {
					t.Fatalf("%+v", r)
				}
				wantGrants(t, s, "s", grantRow{1, 1, 0, false, false}, grantRow{2, 2, 1, false, false}, grantRow{4, 4, 2, false, false})
			}},
		{name: "renew reports the permit's token", history: append(two, cmdAcquire(2, 6, "m", false)), cmd: Command{Kind: KindRenew, Lease: id(2)},
			want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if !slices.Equal(r.Held, []uint64{3, 2}) { // names m, s
					t.Fatalf("held %v", r.Held)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkApply(t, tc) })
	}
}

// readers: leases 1 and 2 read "rw" (tokens 1, 2), lease 3 and 4 exist.
func readers() []Command {
	return []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdCreate(4, 4), cmdCreate(5, 5),
		cmdRead(1, 6, "rw", false), cmdRead(2, 7, "rw", false)}
}

func TestReadWriteLock(t *testing.T) {
	writerWaits := append(readers(), cmdAcquire(3, 8, "rw", true))               // a writer queued behind the readers
	readerBehind := append(slices.Clone(writerWaits), cmdRead(4, 9, "rw", true)) // and a reader behind it
	writer := []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdCreate(4, 4), cmdAcquire(1, 5, "rw", false),
		cmdRead(2, 6, "rw", true), cmdRead(3, 7, "rw", true), cmdAcquire(4, 8, "rw", true)} // writer, 2 readers queued, a writer
	tests := []applyCase{
		{name: "a reader beside readers", history: readers(), cmd: cmdRead(3, 8, "rw", false), want: OK, token: 3,
			check: func(t *testing.T, s *State, r Result) {
				if !r.Shared || r.Slot != 0 {
					t.Fatalf("%+v", r)
				}
				wantGrants(t, s, "rw", grantRow{1, 1, 0, true, false}, grantRow{2, 2, 0, true, false}, grantRow{3, 3, 0, true, false})
			}},
		{name: "a writer while readers hold: refused", history: readers(), cmd: cmdAcquire(3, 8, "rw", false), want: LockHeld, token: 1},
		{name: "a writer while readers hold: queued", history: readers(), cmd: cmdAcquire(3, 8, "rw", true), want: Queued},
		{name: "a reader behind a queued writer is not let in", history: writerWaits, cmd: cmdRead(4, 9, "rw", false), want: LockHeld},
		{name: "a reader behind a queued writer waits", history: writerWaits, cmd: cmdRead(4, 9, "rw", true), want: Queued},
		{name: "the last reader out lets the writer in, with a larger token",
			history: append(slices.Clone(readerBehind), cmdRelease(1, 10, "rw")), cmd: cmdRelease(2, 11, "rw"), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "rw", grantRow{3, 3, 0, false, false})
			}},
		{name: "a writer out lets in the readers up to the next writer", history: writer, cmd: cmdRelease(1, 9, "rw"), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "rw", grantRow{2, 2, 0, true, false}, grantRow{3, 3, 0, true, false})
				if k, _ := s.Lock("rw"); len(k.Waiters) != 1 || k.Waiters[0] != id(4) {
					t.Fatalf("waiters %v", k.Waiters)
				}
			}},
		{name: "a queued writer that gives up lets the readers behind it in", history: readerBehind,
			cmd: Command{Kind: KindCancelWait, Lease: id(3), Seq: 8, Name: "rw"}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "rw", grantRow{1, 1, 0, true, false}, grantRow{2, 2, 0, true, false}, grantRow{4, 3, 0, true, false})
				if a, _ := s.Answer(id(4), 9, "rw"); a.Code != OK || !a.Shared {
					t.Fatalf("reader's answer %+v", a)
				}
			}},
		{name: "a queued writer whose lease ends lets the readers behind it in", history: readerBehind, cmd: expire(3), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantGrants(t, s, "rw", grantRow{1, 1, 0, true, false}, grantRow{2, 2, 0, true, false}, grantRow{4, 3, 0, true, false})
			}},
		{name: "an expired reader's lock-delay keeps writers out", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2),
			withDelay(cmdRead(1, 3, "rw", false), time.Second), expire(1)}, cmd: cmdAcquire(2, 4, "rw", false), want: LockHeld, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if !r.Delayed {
					t.Fatal("not reported delayed")
				}
			}},
		{name: "an expired reader's lock-delay lets readers in", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2),
			withDelay(cmdRead(1, 3, "rw", false), time.Second), expire(1)}, cmd: cmdRead(2, 4, "rw", false), want: OK, token: 2},
		{name: "an expired writer's lock-delay keeps readers out", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2),
			withDelay(cmdAcquire(1, 3, "rw", false), time.Second), expire(1)}, cmd: cmdRead(2, 4, "rw", false), want: LockHeld, token: 1},
		{name: "shared on a semaphore is invalid", history: []Command{cmdCreate(1, 1)},
			cmd: func() Command { c := cmdRead(1, 2, "s", false); c.Permits = 2; return c }(), want: Invalid},
		{name: "shared on an existing semaphore is refused with its count", history: []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdSem(1, 3, "s", false, 2)},
			cmd: cmdRead(2, 4, "s", false), want: PermitsMismatch},
		{name: "a reader who holds asks again", history: readers(), cmd: cmdRead(1, 8, "rw", false), want: AlreadyHeld, token: 1},
		{name: "a mutex acquire is the writer", history: readers(), cmd: cmdAcquire(3, 8, "rw", true), want: Queued},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkApply(t, tc) })
	}
}
