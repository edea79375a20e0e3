package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/fsm"
)

// The lazy takeover on the fake clock: a new leader serves before its lease
// deadlines are built, builds them a chunk at a time while entries apply,
// and never expires a lease sooner than promised meanwhile.

// lazyTakeover is a leader that took over s: activated, the build not run,
// its leases in id order (the builder's order is the map's; the tests
// choose which lease a chunk reaches).
func lazyTakeover(t *testing.T, c *clocktest.Fake, s *fsm.State) *lessor {
	t.Helper()
	ls := newTestLessor(c)
	ls.activate(s)
	if ls.build == nil {
		t.Fatal("no takeover build for a state with leases")
	}
	slices.SortFunc(ls.build.ids, byID)
	return ls
}

// commit applies cmds to s as committed entries and passes their events to
// ls, as the apply path does.
func commit(t *testing.T, s *fsm.State, ls *lessor, cmds ...fsm.Command) {
	t.Helper()
	results := make([]fsm.Result, len(cmds))
	for i := range cmds {
		results[i] = s.Apply(&cmds[i])
		if results[i].Code != fsm.OK {
			t.Fatalf("%v: %v %s", cmds[i].Kind, results[i].Code, results[i].Reason)
		}
	}
	ls.applied(results)
}

// expires returns the leases due proposes to expire now (with duties).
func expires(ls *lessor) []fsm.LeaseID {
	_, cmds := ls.due(true)
	var ids []fsm.LeaseID
	for _, c := range cmds {
		if c.Kind == fsm.KindExpire {
			ids = append(ids, c.Lease)
		}
	}
	return ids
}

// threeLeases is a state at logical clock 6 s with leases 1, 2 and 3 of TTL
// 10 s created at 0; lease 2 was renewed at 4 s (logged). A new leader's
// takeover deadlines (TTL − logged time since the last renewal + 400 ms of
// slack): lease 1 and 3 in 4.4 s, lease 2 in 8.4 s.
func threeLeases(t *testing.T) *fsm.State {
	s := fsm.New()
	applyAll(t, s,
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{1}, Lease: fsm.LeaseID{1}, TTL: 10 * time.Second},
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{2}, Lease: fsm.LeaseID{2}, TTL: 10 * time.Second},
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{3}, Lease: fsm.LeaseID{3}, TTL: 10 * time.Second},
		tick(4*time.Second),
		fsm.Command{Kind: fsm.KindRenew, Lease: fsm.LeaseID{2}},
		tick(2*time.Second),
	)
	return s
}

// TestLazyTakeoverServesFirst: activation builds no deadline; until the
// build reaches a lease this leader does not expire it, however late, but
// it keeps the logical clock ticking; once built, every lease whose
// deadline passed is expired at the next tick.
func TestLazyTakeoverServesFirst(t *testing.T) {
	s := threeLeases(t)
	c := clocktest.New()
	ls := lazyTakeover(t, c, s)
	if !ls.isActive() || len(ls.leases) != 0 || len(ls.expiry) != 0 {
		t.Fatalf("activation: active %v, %d leases tracked, %d deadlines; want active, none built", ls.isActive(), len(ls.leases), len(ls.expiry))
	}
	c.Advance(time.Minute) // every takeover deadline long past
	tk, cmds := ls.due(true)
	if tk == nil || len(cmds) != 0 {
		t.Fatalf("before the build: tick %+v, duties %+v; want a tick and no expiry", tk, cmds)
	}
	if !ls.buildSome(s, 1) { // lease 1
		t.Fatal("build ended after one of three leases")
	}
	if got := expires(ls); !slices.Equal(got, []fsm.LeaseID{{1}}) {
		t.Fatalf("after lease 1 was built: expires %v, want lease 1 only", got)
	}
	if ls.buildSome(s, 5) {
		t.Fatal("build not over after all leases")
	}
	got := expires(ls)
	slices.SortFunc(got, byID)
	if !slices.Equal(got, []fsm.LeaseID{{2}, {3}}) {
		t.Fatalf("after the build: expires %v, want leases 2 and 3", got)
	}
	if ls.building() {
		t.Fatal("still building after the last chunk")
	}
}

// TestLazyTakeoverDuringBuild: what applies while the build runs, each
// case with the exact deadline it must give (a lease is expired at it and
// not a nanosecond before).
func TestLazyTakeoverDuringBuild(t *testing.T) {
	id := func(n byte) fsm.LeaseID { return fsm.LeaseID{n} }
	for _, tt := range []struct {
		name string
		// before is how many leases the build reaches (in id order) before
		// during runs, at 1 s after the takeover.
		before int
		during func(t *testing.T, s *fsm.State, ls *lessor)
		// want: each lease's deadline after the takeover; absent: never
		// expired (ended).
		want map[fsm.LeaseID]time.Duration
	}{
		{
			name: "nothing happens",
			want: map[fsm.LeaseID]time.Duration{id(1): 4400 * time.Millisecond, id(2): 8400 * time.Millisecond, id(3): 4400 * time.Millisecond},
		},
		{
			name:   "renewal before the build reaches the lease",
			before: 0,
			during: func(t *testing.T, s *fsm.State, ls *lessor) {
				commit(t, s, ls, fsm.Command{Kind: fsm.KindRenew, Lease: id(3)})
			},
			want: map[fsm.LeaseID]time.Duration{id(1): 4400 * time.Millisecond, id(2): 8400 * time.Millisecond, id(3): 11 * time.Second},
		},
		{
			name:   "renewal after the build reached the lease",
			before: 3,
			during: func(t *testing.T, s *fsm.State, ls *lessor) {
				commit(t, s, ls, fsm.Command{Kind: fsm.KindRenew, Lease: id(1)})
			},
			want: map[fsm.LeaseID]time.Duration{id(1): 11 * time.Second, id(2): 8400 * time.Millisecond, id(3): 4400 * time.Millisecond},
		},
		{
			// An event promising less than the takeover (a renewal of a
			// shorter TTL): the build keeps the earlier leader's promise.
			name:   "short renewal before the build reaches the lease",
			before: 1,
			during: func(_ *testing.T, _ *fsm.State, ls *lessor) {
				ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.LeaseRenewed, Lease: id(2), TTL: time.Second, Renewals: 1}}}})
			},
			want: map[fsm.LeaseID]time.Duration{id(1): 4400 * time.Millisecond, id(2): 8400 * time.Millisecond, id(3): 4400 * time.Millisecond},
		},
		{
			name:   "revoke before the build reaches the lease",
			before: 2,
			during: func(t *testing.T, s *fsm.State, ls *lessor) {
				commit(t, s, ls, fsm.Command{Kind: fsm.KindRevoke, RequestID: fsm.RequestID{9}, Lease: id(3)})
			},
			want: map[fsm.LeaseID]time.Duration{id(1): 4400 * time.Millisecond, id(2): 8400 * time.Millisecond},
		},
		{
			name:   "revoke after the build reached the lease",
			before: 1,
			during: func(t *testing.T, s *fsm.State, ls *lessor) {
				commit(t, s, ls, fsm.Command{Kind: fsm.KindRevoke, RequestID: fsm.RequestID{9}, Lease: id(1)})
			},
			want: map[fsm.LeaseID]time.Duration{id(2): 8400 * time.Millisecond, id(3): 4400 * time.Millisecond},
		},
		{
			// A lease created during the build has no earlier promise: it is
			// timed (and can expire) before the build ends.
			name:   "lease created during the build",
			before: 0,
			during: func(t *testing.T, s *fsm.State, ls *lessor) {
				commit(t, s, ls, fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{4}, Lease: id(4), TTL: 2 * time.Second})
			},
			want: map[fsm.LeaseID]time.Duration{id(1): 4400 * time.Millisecond, id(2): 8400 * time.Millisecond, id(3): 4400 * time.Millisecond, id(4): 3 * time.Second},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := threeLeases(t)
			c := clocktest.New()
			start := c.Now()
			ls := lazyTakeover(t, c, s)
			for range tt.before {
				ls.buildSome(s, 1)
			}
			c.Advance(time.Second)
			if tt.during != nil {
				tt.during(t, s, ls)
			}
			c.Advance(time.Second) // 2 s: no promise runs out before 3 s
			if got := expires(ls); len(got) != 0 {
				t.Fatalf("mid-build at 2s: expires %v", got)
			}
			for ls.buildSome(s, 1) {
			}
			// Walk the clock to every deadline: 1 ns before it nothing is
			// expired, at it exactly the leases due then are.
			var ats []time.Duration
			for _, at := range tt.want {
				ats = append(ats, at)
			}
			slices.Sort(ats)
			ats = slices.Compact(ats)
			for _, at := range ats {
				c.Advance(start.Add(at - time.Nanosecond).Sub(c.Now()))
				if got := expires(ls); len(got) != 0 {
					t.Fatalf("1ns before %v: expires %v", at, got)
				}
				c.Advance(time.Nanosecond)
				var want []fsm.LeaseID
				for l, d := range tt.want {
					if d == at {
						want = append(want, l)
					}
				}
				got := expires(ls)
				slices.SortFunc(got, byID)
				slices.SortFunc(want, byID)
				if !slices.Equal(got, want) {
					t.Fatalf("at %v: expires %v, want %v", at, got, want)
				}
				for _, l := range got { // the expiries commit
					commit(t, s, ls, fsm.Command{Kind: fsm.KindExpire, Lease: l, Renewals: ls.leases[l].renewals})
				}
			}
			c.Advance(time.Hour)
			if got := expires(ls); len(got) != 0 {
				t.Fatalf("an hour later: expires %v, want nothing left", got)
			}
		})
	}
}

// TestLazyTakeoverLeadershipLost: leadership lost mid-build stops the build
// and forgets what it built; the builder finds nothing to do; the next
// takeover builds from that state and its own clocks, from scratch.
func TestLazyTakeoverLeadershipLost(t *testing.T) {
	s := threeLeases(t)
	c := clocktest.New()
	ls := lazyTakeover(t, c, s)
	ls.buildSome(s, 1)
	ls.deactivate()
	if ls.buildSome(s, 10) || ls.building() || len(ls.leases) != 0 {
		t.Fatalf("after leadership was lost: building %v, %d leases tracked", ls.building(), len(ls.leases))
	}
	c.Advance(time.Minute)
	if tk, cmds := ls.due(true); tk != nil || cmds != nil {
		t.Fatalf("a node that is not leading proposed %+v %+v", tk, cmds)
	}
	// Leading again a minute later, with two seconds more logged: every
	// deadline counts from the new takeover (lease 2: 10 s − (8 s − 4 s −
	// 400 ms) = 6.4 s).
	applyAll(t, s, tick(2*time.Second))
	takeOver(ls, s)
	if d, ok := ls.deadline(fsm.LeaseID{2}); !ok || d.Sub(c.Now()) != 6400*time.Millisecond {
		t.Fatalf("lease 2 after the second takeover: deadline in %v, want 6.4s", d.Sub(c.Now()))
	}
	if len(ls.leases) != 3 || len(ls.expiry) != 3 {
		t.Fatalf("second takeover: %d leases, %d deadlines; want 3 and 3", len(ls.leases), len(ls.expiry))
	}
}

// TestLessorBuilderRuns: the builder goroutine (run) builds a takeover
// under the replica's read lock without a test driving its chunks, and
// stops with run's context.
func TestLessorBuilderRuns(t *testing.T) {
	s := millionish(t, 3*buildChunk+5)
	c := clocktest.New()
	reads := 0
	read := func(fn func(*fsm.State)) { reads++; fn(s) } // one caller: the builder
	noop := func(_ context.Context, cmds []fsm.Command) []proposalResult { return make([]proposalResult, len(cmds)) }
	ls := newLessor(c, 100*time.Millisecond, noop, read, discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ls.run(ctx) }()
	ls.activate(s)
	for i := 0; ls.building(); i++ {
		if i == 10_000 {
			t.Fatal("the builder did not finish")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if len(ls.leases) != 3*buildChunk+5 || len(ls.expiry) != 3*buildChunk+5 {
		t.Fatalf("built %d leases, %d deadlines; want %d", len(ls.leases), len(ls.expiry), 3*buildChunk+5)
	}
	if reads != 4 {
		t.Fatalf("%d chunks under the read lock, want 4", reads)
	}
}

// millionish is a state with n live leases of 30 s.
func millionish(t testing.TB, n int) *fsm.State {
	s := fsm.New()
	for j := range n {
		lid := fsm.LeaseID{byte(j), byte(j >> 8), byte(j >> 16), byte(j >> 24), 1}
		c := fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID(lid), Lease: lid, TTL: 30 * time.Second}
		if r := s.Apply(&c); r.Code != fsm.OK {
			t.Fatal(r.Code, r.Reason)
		}
	}
	return s
}
