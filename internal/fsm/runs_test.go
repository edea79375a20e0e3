package fsm

import (
	"slices"
	"testing"
	"time"
)

const day = 24 * time.Hour

// cmdOnce is cmdAcquire with a once-per window.
func cmdOnce(l, r byte, name string, wait bool, window time.Duration) Command {
	c := cmdAcquire(l, r, name, wait)
	c.OncePer = window
	return c
}

// cmdRan is cmdRelease of a run that succeeded, proposed at wall (Unix ns).
func cmdRan(l, r byte, name string, wall int64) Command {
	c := cmdRelease(l, r, name)
	c.Ran, c.Wall = true, wall
	return c
}

func tick(d time.Duration) Command { return Command{Kind: KindTick, Elapsed: d} }

// ticks advances the logical clock by d in ticks of at most MaxElapsed.
func ticks(d time.Duration) []Command {
	var out []Command
	for ; d > 0; d -= min(d, MaxElapsed) {
		out = append(out, tick(min(d, MaxElapsed)))
	}
	return out
}

func hist(parts ...any) []Command {
	var out []Command
	for _, p := range parts {
		switch p := p.(type) {
		case Command:
			out = append(out, p)
		case []Command:
			out = append(out, p...)
		}
	}
	return out
}

// ranBy1 is lease 1 (owner w1) running "a" once per day at logical 1s,
// wall 1000: its grant has token 1.
func ranBy1() []Command {
	return hist(cmdCreate(1, 1), cmdCreate(2, 2), tick(time.Second), cmdOnce(1, 3, "a", false, day), cmdRan(1, 4, "a", 1000))
}

// TestOncePer: the commands of once per window and their refusals, each
// against a prepared history. Every refusal leaves the state unchanged
// (but for the memory of answers); expected values are literals.
func TestOncePer(t *testing.T) {
	wantRun := func(t *testing.T, s *State, want RunView) {
		t.Helper()
		got, ok := s.Run(want.Name)
		if !ok || got != want {
			t.Fatalf("run %+v (kept %v), want %+v", got, ok, want)
		}
	}
	noRun := func(t *testing.T, s *State, _ Result) {
		t.Helper()
		if s.NumRuns() != 0 {
			v, _ := s.Run("a")
			t.Fatalf("%d runs recorded: %+v", s.NumRuns(), v)
		}
	}
	tests := []applyCase{
		{name: "once-per acquire of a name never run is granted", history: hist(cmdCreate(1, 1)),
			cmd: cmdOnce(1, 2, "a", false, day), want: OK, token: 1},
		{name: "release with ran records the run", history: hist(cmdCreate(1, 1), tick(time.Second), cmdOnce(1, 2, "a", false, day), tick(2*time.Second)),
			cmd: cmdRan(1, 3, "a", 1000), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantRun(t, s, RunView{Name: "a", Token: 1, LeaseNumber: 1, Owner: "w1", At: 3 * time.Second, Wall: 1000, Window: day})
				if _, held := s.Lock("a"); held {
					t.Fatal("the lock is still held after the release")
				}
			}},
		{name: "once-per acquire inside the window is refused with the run", history: hist(ranBy1(), ticks(time.Hour)),
			cmd: cmdOnce(2, 5, "a", false, day), want: RanRecently, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				want := RunView{Name: "a", Token: 1, LeaseNumber: 1, Owner: "w1", At: time.Second, Age: time.Hour, Wall: 1000, Window: day}
				if r.Run != want {
					t.Fatalf("result's run %+v, want %+v", r.Run, want)
				}
			}},
		{name: "once-per acquire 1ns before the window ends is refused", history: hist(ranBy1(), ticks(day-time.Nanosecond)),
			cmd: cmdOnce(2, 5, "a", false, day), want: RanRecently, token: 1},
		{name: "once-per acquire as the window ends is granted", history: hist(ranBy1(), ticks(day)),
			cmd: cmdOnce(2, 5, "a", false, day), want: OK, token: 2, check: noRun},
		{name: "a waiting once-per acquire inside the window is refused, not queued", history: hist(ranBy1()),
			cmd: cmdOnce(2, 5, "a", true, day), want: RanRecently, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if _, ok := s.Lock("a"); ok {
					t.Fatal("queued")
				}
			}},
		{name: "a shorter window asked is passed sooner", history: hist(ranBy1(), ticks(time.Hour)),
			cmd: cmdOnce(2, 5, "a", false, time.Hour), want: OK, token: 2},
		{name: "a record inside the window outranks a holder", history: hist(ranBy1(), cmdAcquire(1, 5, "a", false)),
			cmd: cmdOnce(2, 6, "a", false, day), want: RanRecently, token: 1},
		{name: "a held lock with no run in the window is LockHeld", history: hist(cmdCreate(1, 1), cmdCreate(2, 2), cmdOnce(1, 3, "a", false, day)),
			cmd: cmdOnce(2, 4, "a", false, day), want: LockHeld, token: 1},
		{name: "acquire without once-per ignores the record", history: hist(ranBy1()),
			cmd: cmdAcquire(2, 5, "a", false), want: OK, token: 2},
		{name: "a record is per name", history: hist(ranBy1()),
			cmd: cmdOnce(2, 5, "b", false, day), want: OK, token: 2},
		{name: "release without ran records nothing", history: hist(cmdCreate(1, 1), cmdOnce(1, 2, "a", false, day)),
			cmd: cmdRelease(1, 3, "a"), want: OK, check: noRun},
		{name: "release with ran of a grant without a window records nothing", history: hist(cmdCreate(1, 1), cmdAcquire(1, 2, "a", false)),
			cmd: cmdRan(1, 3, "a", 1000), want: OK, check: noRun},
		{name: "a lease that expires mid-run records nothing", history: hist(cmdCreate(1, 1), cmdOnce(1, 2, "a", false, day)),
			cmd: Command{Kind: KindExpire, Lease: id(1)}, want: OK, check: noRun},
		{name: "a force-released run records nothing", history: hist(cmdCreate(1, 1), cmdOnce(1, 2, "a", false, day)),
			cmd: Command{Kind: KindForceRelease, RequestID: req(9), Name: "a", Token: 1}, want: OK, check: noRun},
		{name: "release with ran by a lease that does not hold the lock records nothing", history: hist(cmdCreate(1, 1), cmdCreate(2, 2), cmdOnce(1, 3, "a", false, day)),
			cmd: cmdRan(2, 4, "a", 1000), want: NotHolder, check: noRun},
		{name: "a retried release with ran records once", history: hist(ranBy1(), tick(time.Second)),
			cmd: cmdRan(1, 4, "a", 2000), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantRun(t, s, RunView{Name: "a", Token: 1, LeaseNumber: 1, Owner: "w1", At: time.Second, Age: time.Second, Wall: 1000, Window: day})
			}},
		{name: "a retried refused acquire answers the run again", history: hist(ranBy1(), cmdOnce(2, 5, "a", false, day), tick(time.Second)),
			cmd: cmdOnce(2, 5, "a", false, day), want: RanRecently, token: 1,
			check: func(t *testing.T, s *State, r Result) {
				if r.Run.Age != time.Second || r.Run.Wall != 1000 {
					t.Fatalf("retry's run %+v", r.Run)
				}
			}},
		{name: "a later run replaces the record", history: hist(ranBy1(), ticks(day), cmdOnce(2, 5, "a", false, time.Hour), tick(time.Second)),
			cmd: cmdRan(2, 6, "a", 3000), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				wantRun(t, s, RunView{Name: "a", Token: 2, LeaseNumber: 2, Owner: "w2", At: time.Second + day + time.Second, Wall: 3000, Window: time.Hour})
				if len(s.runOrder) != 1 {
					t.Fatalf("expiry order %d long", len(s.runOrder))
				}
			}},
		{name: "the tick that passes a record's window forgets it", history: hist(ranBy1(), ticks(day-time.Second)),
			cmd: tick(time.Second), want: OK, check: noRun},
		{name: "a record is kept for its own window: a longer ask sees it only that long",
			history: hist(cmdCreate(1, 1), cmdCreate(2, 2), cmdOnce(1, 3, "a", false, time.Hour), cmdRan(1, 4, "a", 1000), ticks(time.Hour)),
			cmd:     cmdOnce(2, 5, "a", false, day), want: OK, token: 2},

		// The queue.
		{name: "a queued once-per waiter is refused at its turn after the run",
			history: hist(cmdCreate(1, 1), cmdCreate(2, 2), cmdOnce(1, 3, "a", false, day), cmdOnce(2, 4, "a", true, day)),
			cmd:     cmdRan(1, 5, "a", 1000), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if _, ok := s.Lock("a"); ok {
					t.Fatal("the lock was handed on")
				}
				if got, _ := s.Answer(id(2), 4, "a"); got.Code != RanRecently || got.Token != 1 || got.Run.Wall != 1000 {
					t.Fatalf("the waiter's call answers %+v", got)
				}
				if l, _ := s.Lease(id(2)); len(l.Waits) != 0 {
					t.Fatalf("lease 2 still waits for %v", l.Waits)
				}
				if !slices.ContainsFunc(r.Events, func(e Event) bool { return e.Kind == WaitCancelled && e.Lease == id(2) && e.Seq == 4 }) {
					t.Fatalf("no wait-cancelled event for the waiter: %+v", r.Events)
				}
			}},
		{name: "a failed run hands the lock to the once-per waiter",
			history: hist(cmdCreate(1, 1), cmdCreate(2, 2), cmdOnce(1, 3, "a", false, day), cmdOnce(2, 4, "a", true, day)),
			cmd:     cmdRelease(1, 5, "a"), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); k.Holder != id(2) || k.Token != 2 {
					t.Fatalf("lock %+v", k)
				}
			}},
		{name: "a run cut short by expiry hands the lock to the once-per waiter",
			history: hist(cmdCreate(1, 1), cmdCreate(2, 2), cmdOnce(1, 3, "a", false, day), cmdOnce(2, 4, "a", true, day)),
			cmd:     Command{Kind: KindExpire, Lease: id(1)}, want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); k.Holder != id(2) || k.Token != 2 {
					t.Fatalf("lock %+v", k)
				}
			}},
		{name: "a refused waiter passes the turn to the next waiter",
			history: hist(cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdOnce(1, 4, "a", false, day), cmdOnce(2, 5, "a", true, day), cmdAcquire(3, 6, "a", true)),
			cmd:     cmdRan(1, 7, "a", 1000), want: OK,
			check: func(t *testing.T, s *State, r Result) {
				if k, _ := s.Lock("a"); k.Holder != id(3) || k.Token != 2 || len(k.Waiters) != 0 {
					t.Fatalf("lock %+v", k)
				}
			}},

		// Bad input changes nothing.
		{name: "once-per window above the limit", history: hist(cmdCreate(1, 1)),
			cmd: cmdOnce(1, 2, "a", false, MaxOncePer+1), want: Invalid},
		{name: "negative once-per window", history: hist(cmdCreate(1, 1)),
			cmd: cmdOnce(1, 2, "a", false, -time.Second), want: Invalid},
		{name: "ran without the wall clock", history: hist(cmdCreate(1, 1), cmdOnce(1, 2, "a", false, day)),
			cmd: cmdRan(1, 3, "a", 0), want: Invalid},
		{name: "a wall clock without ran", history: hist(cmdCreate(1, 1), cmdOnce(1, 2, "a", false, day)),
			cmd: func() Command { c := cmdRelease(1, 3, "a"); c.Wall = 1000; return c }(), want: Invalid},
		{name: "ran with a wall clock before 1970", history: hist(cmdCreate(1, 1), cmdOnce(1, 2, "a", false, day)),
			cmd: cmdRan(1, 3, "a", -1), want: Invalid},
		{name: "once-per on a release", history: hist(cmdCreate(1, 1), cmdOnce(1, 2, "a", false, day)),
			cmd: func() Command { c := cmdRelease(1, 3, "a"); c.OncePer = day; return c }(), want: Invalid},
		{name: "ran on an acquire", history: hist(cmdCreate(1, 1)),
			cmd: func() Command { c := cmdOnce(1, 2, "a", false, day); c.Ran, c.Wall = true, 1; return c }(), want: Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkApply(t, tt)
		})
	}
}
