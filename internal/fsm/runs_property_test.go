package fsm

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// onceHost is one host of the once-per property: its lease, its calls and
// what it is doing, as the host itself knows it.
type onceHost struct {
	lease   LeaseID // zero: none (never made, or expired)
	seq     uint64  // its last call number
	waiting uint64  // the call number of its queued Acquire, 0 if none
	running bool
}

// TestOncePerNeverTwiceInAWindow: hosts running one job once per window
// never start it within the window (in real time) of a successful run's
// finish, whatever happens: leader changes (a new leader starts from a
// snapshot of the state, and while there is no leader no tick commits, so
// real time passes that the logical clock never counts), a leader whose
// ticks undercount the time that passed, retried releases, leases that
// expire mid-run, runs that fail, waits in the queue and waits given up.
//
// The model is the test's own: real time is a counter only the test
// advances (the fsm sees time only through ticks, each at most the real
// time that passed); a success is a Release with Ran of a grant the host
// holds; a start is a Granted event for a host's Acquire.
func TestOncePerNeverTwiceInAWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const name = "jobs/nightly"
		window := time.Duration(rapid.IntRange(1, 20).Draw(t, "window")) * 100 * time.Millisecond
		s := New()
		var (
			now       time.Duration // real time
			finishes  []time.Duration
			nextLease byte
			nextReq   byte
		)
		hosts := make([]onceHost, 3)
		newReq := func() RequestID { nextReq++; return RequestID{nextReq, 1} }
		byLease := func(id LeaseID) *onceHost {
			for i := range hosts {
				if hosts[i].lease == id && !id.IsZero() {
					return &hosts[i]
				}
			}
			return nil
		}
		apply := func(c Command) Result {
			r := s.Apply(&c)
			if r.Code == Invalid {
				t.Fatalf("%v invalid: %s", c.Kind, r.Reason)
			}
			for _, e := range r.Events {
				h := byLease(e.Lease)
				switch {
				case h == nil:
				case e.Kind == Granted:
					for _, f := range finishes {
						if now-f < window {
							t.Fatalf("started at %v, %v after a successful run finished at %v: inside the window %v", now, now-f, f, window)
						}
					}
					h.running, h.waiting = true, 0
				case e.Kind == WaitCancelled:
					h.waiting = 0
				case e.Kind == LeaseEnded:
					*h = onceHost{}
				}
			}
			checkInvariants(t, s)
			return r
		}
		// A host makes a call only when it waits for no answer (it waits
		// in no queue), so each call acknowledges every earlier one.
		call := func(h *onceHost, c Command) Command {
			h.seq++
			c.RequestID, c.Lease, c.Seq, c.Ack, c.Name = newReq(), h.lease, h.seq, h.seq, name
			return c
		}
		leaderTicks := func(elapsed time.Duration) {
			for elapsed > 0 {
				d := min(elapsed, 100*time.Millisecond)
				apply(Command{Kind: KindTick, Elapsed: d})
				elapsed -= d
			}
		}
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for range steps {
			h := &hosts[rapid.IntRange(0, len(hosts)-1).Draw(t, "host")]
			switch rapid.IntRange(0, 7).Draw(t, "action") {
			case 0: // time passes; the leader ticks at most what passed
				dt := time.Duration(rapid.IntRange(0, 10).Draw(t, "dt")) * 100 * time.Millisecond
				now += dt
				leaderTicks(dt * time.Duration(rapid.IntRange(1, 4).Draw(t, "measured")) / 4)
			case 1: // the leader changes: no ticks while electing, the new one starts from a snapshot
				now += time.Duration(rapid.IntRange(0, 30).Draw(t, "election")) * 100 * time.Millisecond
				restored, err := Unmarshal(s.Marshal(nil))
				if err != nil {
					t.Fatalf("restore: %v", err)
				}
				s = restored
			case 2: // a host without a lease makes one
				if h.lease.IsZero() {
					nextLease++
					*h = onceHost{lease: LeaseID{nextLease}}
					apply(Command{Kind: KindCreateLease, RequestID: newReq(), Lease: h.lease, TTL: time.Minute})
				}
			case 3, 4: // a host idle with a lease tries the job, waiting or not
				if !h.lease.IsZero() && !h.running && h.waiting == 0 {
					c := call(h, Command{Kind: KindAcquire, Wait: rapid.Bool().Draw(t, "wait"), OncePer: window})
					if r := apply(c); r.Code == Queued {
						h.waiting = c.Seq
					}
				}
			case 5: // a running host finishes: succeeded or failed; the release may be retried
				if h.running {
					c := call(h, Command{Kind: KindRelease})
					ok := rapid.Bool().Draw(t, "succeeded")
					if ok {
						c.Ran, c.Wall = true, int64(now)+1
					}
					h.running = false
					if r := apply(c); r.Code == OK && ok {
						finishes = append(finishes, now)
					}
					if rapid.Bool().Draw(t, "retry") {
						apply(c)
					}
				}
			case 6: // a host's lease expires (mid-run, or while it waits)
				if !h.lease.IsZero() {
					apply(Command{Kind: KindExpire, Lease: h.lease})
				}
			case 7: // a waiting host gives up
				if h.waiting != 0 {
					apply(Command{Kind: KindCancelWait, Lease: h.lease, Seq: h.waiting, Name: name})
					h.waiting = 0
				}
			}
		}
	})
}
