package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// lockEvent is what TestLockEvents compares of an Event.
type lockEvent struct {
	Kind   EventKind
	Name   string
	Number uint64
	Owner  string
	Token  uint64
	Seq    uint64
	Cause  Cause
	Value  string
}

// TestLockEvents: every change of a lock reports itself, in order, with
// who, which grant and why: what a Watch shows.
func TestLockEvents(t *testing.T) {
	withDelay := func(l, r byte) Command {
		c := cmdAcquire(l, r, "a", true)
		c.LockDelay = 5 * time.Second
		return c
	}
	held := []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false)}
	queued := append(slices.Clone(held), cmdAcquire(2, 4, "a", true))
	delayed := []Command{cmdCreate(1, 1), cmdCreate(2, 2), withDelay(1, 3), cmdAcquire(2, 4, "a", true),
		{Kind: KindExpire, Lease: id(1)}}
	tests := []struct {
		name    string
		history []Command
		cmd     Command
		want    []lockEvent
	}{
		{name: "acquire a free lock", history: held[:2], cmd: cmdAcquire(1, 3, "a", false),
			want: []lockEvent{{Kind: Granted, Name: "a", Number: 1, Owner: "w1", Token: 1}}},
		{name: "acquire with wait joins the queue", history: held, cmd: cmdAcquire(2, 4, "a", true),
			want: []lockEvent{{Kind: WaitStarted, Name: "a", Number: 2, Owner: "w2", Seq: 4}}},
		{name: "acquire without wait on a held lock", history: held, cmd: cmdAcquire(2, 4, "a", false)},
		{name: "a retried acquire", history: held, cmd: cmdAcquire(1, 3, "a", false)},
		{name: "release hands on to the waiter", history: queued, cmd: cmdRelease(1, 5, "a"),
			want: []lockEvent{{Kind: Released, Name: "a", Number: 1, Owner: "w1", Token: 1, Cause: CauseReleased},
				{Kind: Granted, Name: "a", Number: 2, Owner: "w2", Token: 2}}},
		{name: "revoke of the holder", history: queued, cmd: Command{Kind: KindRevoke, RequestID: req(9), Lease: id(1)},
			want: []lockEvent{{Kind: Released, Name: "a", Number: 1, Owner: "w1", Token: 1, Cause: CauseRevoked},
				{Kind: Granted, Name: "a", Number: 2, Owner: "w2", Token: 2}}},
		{name: "expiry of the holder starts the lock-delay", history: delayed[:4], cmd: Command{Kind: KindExpire, Lease: id(1)},
			want: []lockEvent{{Kind: Released, Name: "a", Number: 1, Owner: "w1", Token: 1, Cause: CauseExpired},
				{Kind: DelayStarted, Name: "a", Token: 1}}},
		{name: "grant-next ends the lock-delay", history: delayed, cmd: Command{Kind: KindGrantNext, Name: "a", Token: 1},
			want: []lockEvent{{Kind: DelayEnded, Name: "a", Token: 1}, {Kind: Granted, Name: "a", Number: 2, Owner: "w2", Token: 2}}},
		{name: "a late grant-next", history: delayed, cmd: Command{Kind: KindGrantNext, Name: "a", Token: 7}},
		{name: "expiry of a waiter", history: queued, cmd: Command{Kind: KindExpire, Lease: id(2)},
			want: []lockEvent{{Kind: WaitEnded, Name: "a", Number: 2, Owner: "w2", Seq: 4, Cause: CauseExpired}}},
		{name: "revoke of a waiter", history: queued, cmd: Command{Kind: KindRevoke, RequestID: req(9), Lease: id(2)},
			want: []lockEvent{{Kind: WaitEnded, Name: "a", Number: 2, Owner: "w2", Seq: 4, Cause: CauseRevoked}}},
		{name: "cancel-wait", history: queued, cmd: Command{Kind: KindCancelWait, Lease: id(2), Name: "a", Seq: 4},
			want: []lockEvent{{Kind: WaitCancelled, Name: "a", Number: 2, Owner: "w2", Seq: 4}}},
		{name: "force-release hands on to the waiter", history: queued,
			cmd: Command{Kind: KindForceRelease, RequestID: req(9), Name: "a", Token: 1},
			want: []lockEvent{{Kind: Released, Name: "a", Number: 1, Owner: "w1", Token: 1, Cause: CauseForced},
				{Kind: Granted, Name: "a", Number: 2, Owner: "w2", Token: 2}}},
		{name: "renew reports no lock event", history: held, cmd: Command{Kind: KindRenew, Lease: id(1)}},
		{name: "a put reports the value written", history: held, cmd: cmdPut(8, "a", "v1", 1),
			want: []lockEvent{{Kind: Written, Name: "a", Token: 1, Value: "v1"}}},
		{name: "a put again with the same token", history: append(slices.Clone(held), cmdPut(8, "a", "v1", 1)), cmd: cmdPut(9, "a", "v2", 1),
			want: []lockEvent{{Kind: Written, Name: "a", Token: 1, Value: "v2"}}},
		{name: "a stale put reports nothing", history: append(slices.Clone(queued), cmdRelease(1, 5, "a"), cmdPut(8, "a", "new", 2)),
			cmd: cmdPut(9, "a", "old", 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := withHistory(t, tt.history)
			r := s.Apply(&tt.cmd)
			var got []lockEvent
			for _, e := range r.Events {
				if e.Kind.Watched() {
					got = append(got, lockEvent{e.Kind, e.Name, e.Number, e.Owner, e.Token, e.Seq, e.Cause, string(e.Value)})
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("lock events (%v):\n got %+v\nwant %+v", r.Code, got, tt.want)
			}
		})
	}
}

func TestEventNames(t *testing.T) {
	for k := LeaseStarted; k <= Written; k++ {
		if strings.HasPrefix(k.String(), "event(") {
			t.Errorf("event kind %d has no name", k)
		}
	}
	for c := CauseReleased; c <= CauseForced; c++ {
		if strings.HasPrefix(c.String(), "cause(") {
			t.Errorf("cause %d has no name", c)
		}
	}
	if LeaseEnded.Watched() || LeaseRenewed.Watched() || !WaitEnded.Watched() || !Granted.Watched() || !Written.Watched() {
		t.Error("Watched is wrong")
	}
}
