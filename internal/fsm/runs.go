package fsm

import (
	"cmp"
	"slices"
	"time"
)

// Once per window. A holder that acquired a lock with a once-per window
// (Command.OncePer) and whose run succeeded releases it with Ran: the state
// records the run (its token, holder and the logical clock at the release)
// under the lock's name, replacing the last one. An Acquire with a window
// is refused (RanRecently) while a recorded run of the name is younger than
// its window, and so is a queued one when its turn comes. Time is the
// logical clock (committed ticks of the leader's monotonic clock), which
// runs no faster than real time: a window never ends early by it.
//
// A record is kept for the window of the grant that made it, and forgotten
// by the Tick that passes it: memory holds one record per name whose last
// recorded run is younger than its own window. An Acquire that asks a
// longer window than the recorded run's therefore sees the run only for
// the run's window; hosts of one job give the same window.

// run is a recorded successful run of a lock.
type run struct {
	name   string
	token  uint64        // of the grant that ran
	number uint64        // the holder's lease number
	owner  string        // the holder's owner label
	at     time.Duration // logical clock at the release that recorded it
	wall   int64         // the leader's wall clock then (Unix ns), for people only
	window time.Duration // of the grant: the record is kept until at+window
}

func (r *run) until() time.Duration { return r.at + r.window }

// compareRuns orders records by the end of their window, then by name.
func compareRuns(a, b *run) int {
	if c := cmp.Compare(a.until(), b.until()); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// RunView is a read-only copy of a recorded run.
type RunView struct {
	Name        string
	Token       uint64 // the grant that ran
	LeaseNumber uint64 // its holder's lease
	Owner       string // its holder's owner label
	// At is the logical clock when the run finished (its release); Age how
	// much logical time has passed since, when the view was taken.
	At, Age time.Duration
	// Wall is the leader's wall clock when the run finished, Unix
	// nanoseconds, for people only.
	Wall int64
	// Window is the once-per window of the grant that ran: the record is
	// kept that long after At.
	Window time.Duration
}

func (r *run) view(clock time.Duration) RunView {
	return RunView{Name: r.name, Token: r.token, LeaseNumber: r.number, Owner: r.owner, At: r.at, Age: clock - r.at,
		Wall: r.wall, Window: r.window}
}

// Run returns the recorded run of the lock name, if one is kept.
func (s *State) Run(name string) (RunView, bool) {
	r := s.runs[name]
	if r == nil {
		return RunView{}, false
	}
	return r.view(s.clock), true
}

// NumRuns returns the number of recorded runs kept.
func (s *State) NumRuns() int { return len(s.runs) }

// ranWithin returns the recorded run of name younger than window, if any.
func (s *State) ranWithin(name string, window time.Duration) *run {
	if window <= 0 {
		return nil
	}
	if r := s.runs[name]; r != nil && s.clock-r.at < window {
		return r
	}
	return nil
}

// ranRecently is the refusal of an Acquire that r's run is inside the
// window of.
func (s *State) ranRecently(r *run) Result {
	return Result{Code: RanRecently, Token: r.token, Run: r.view(s.clock)}
}

// recordRun records the run of grant g of lock name, held by l, replacing
// the name's last record; a grant without a window records nothing.
func (s *State) recordRun(name string, g *grant, l *lease, wall int64) {
	if g.oncePer == 0 {
		return
	}
	s.forgetRun(name)
	r := &run{name: name, token: g.token, number: l.number, owner: l.owner, at: s.clock, wall: wall, window: g.oncePer}
	s.runs[r.name] = r
	i, _ := slices.BinarySearchFunc(s.runOrder, r, compareRuns)
	s.runOrder = slices.Insert(s.runOrder, i, r)
}

// forgetRun drops the record of name, if any.
func (s *State) forgetRun(name string) {
	r := s.runs[name]
	if r == nil {
		return
	}
	delete(s.runs, name)
	if i, found := slices.BinarySearchFunc(s.runOrder, r, compareRuns); found {
		s.runOrder = slices.Delete(s.runOrder, i, i+1)
	}
}

// pruneRuns forgets the records whose window the clock has passed.
func (s *State) pruneRuns() {
	n := 0
	for n < len(s.runOrder) && s.runOrder[n].until() <= s.clock {
		delete(s.runs, s.runOrder[n].name)
		n++
	}
	if n > 0 {
		s.runOrder = slices.Delete(s.runOrder, 0, n)
	}
}
