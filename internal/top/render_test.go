package top

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// mutex is a lock held by lease with one grant.
func mutex(name string, lease uint64, owner string, token uint64, ttl, held time.Duration, waiters int) client.LockInfo {
	return client.LockInfo{Name: name, HolderLease: lease, HolderOwner: owner, Token: token, TTLLeft: ttl, HeldFor: held, Waiters: waiters, Permits: 1,
		Grants: []client.GrantInfo{{HolderLease: lease, HolderOwner: owner, Token: token, TTLLeft: ttl, HeldFor: held}}}
}

// cluster is a State with one lock of each kind: a mutex with waiters, a
// semaphore with 3 of 5 permits taken, a read-write lock with two readers,
// a lock in lock-delay, and a free lock waited for.
func cluster() State {
	return State{Read: t0, Source: Watch, Interval: time.Second, GrantRate: 2.5,
		Members: []client.Member{{ID: "n1", Leader: true, Active: true}, {ID: "n2", Active: true}, {ID: "n3"}},
		Locks: []client.LockInfo{
			mutex("jobs/nightly", 12, "host-a", 41, 9*time.Second, 83*time.Second, 2),
			{Name: "exports", HolderLease: 3, HolderOwner: "w1", Token: 40, TTLLeft: 20 * time.Second, HeldFor: 5 * time.Second, Permits: 5, Waiters: 0,
				Grants: []client.GrantInfo{
					{HolderLease: 3, HolderOwner: "w1", Token: 40, TTLLeft: 20 * time.Second, HeldFor: 5 * time.Second},
					{HolderLease: 4, HolderOwner: "w2", Token: 42, Slot: 1, TTLLeft: 20 * time.Second},
					{HolderLease: 5, HolderOwner: "w3", Token: 43, Slot: 2, TTLLeft: 20 * time.Second}}},
			{Name: "config", HolderLease: 7, HolderOwner: "reader-1", Token: 44, TTLLeft: 12 * time.Second, HeldFor: 2 * time.Hour, Permits: 1, Waiters: 1,
				Grants: []client.GrantInfo{
					{HolderLease: 7, HolderOwner: "reader-1", Token: 44, Shared: true, TTLLeft: 12 * time.Second, HeldFor: 2 * time.Hour},
					{HolderLease: 8, HolderOwner: "reader-2", Token: 45, Shared: true, TTLLeft: 3 * time.Second}}},
			{Name: "db/migrate", Token: 39, Delayed: true, DelayLeft: 4 * time.Second, Waiters: 1, Permits: 1, Grants: []client.GrantInfo{{Token: 39, Delayed: true}}},
			{Name: "queue/b", Token: 9, Waiters: 3, Permits: 1},
		}}
}

func TestRender(t *testing.T) {
	long := cluster()
	long.Locks = append(long.Locks, mutex("tenants/acme-corporation/reports/quarterly-close", 99, "batch-7", 50, time.Minute, 0, 0))
	hostile := State{Read: t0, Members: []client.Member{{ID: "n1", Leader: true, Active: true}},
		Locks: []client.LockInfo{mutex("evil\x1b[2Jname", 1, "own\ner", 1, time.Second, time.Second, 0)}}
	tests := []struct {
		name  string
		state State
		view  View
		now   time.Time
		want  []string
	}{{
		name: "every kind of row, by hold time, 1.5s after the read",
		// The TTLs count down and the hold times up from the read; the
		// readers' row shows its first reader and +1; the semaphore its
		// first permit and +2.
		state: cluster(), now: t0.Add(1500 * time.Millisecond),
		want: []string{
			"leader n1, 3 members: n1 n2 n3 (unreachable: n3)",
			"5 locks, 3 held, 7 waiting, 2.5 grants/s, sorted by held (watch, every 1s)",
			"",
			"LOCK          HOLDER            TOKEN  HELD FOR  TTL LEFT  WAITERS  STATE",
			"config        #7 reader-1 (+1)     44     2h00m       10s        1  2 readers",
			"jobs/nightly  #12 host-a           41     1m24s      7.5s        2  held",
			"exports       #3 w1 (+2)           40      6.5s       18s        0  3/5 permits",
			"db/migrate    -                    39         -         -        1  lock-delay 2.5s",
			"queue/b       -                     9         -         -        3  free, waited for",
		},
	}, {
		name:  "long name cut in the middle to fit 90 columns",
		state: long, view: View{Width: 90, Sort: ByToken}, now: t0,
		want: []string{
			"leader n1, 3 members: n1 n2 n3 (unreachable: n3)",
			"6 locks, 4 held, 7 waiting, 2.5 grants/s, sorted by token (watch, every 1s)",
			"",
			"LOCK                HOLDER            TOKEN  HELD FOR  TTL LEFT  WAITERS  STATE",
			"tenants/a…ly-close  #99 batch-7          50         -     1m00s        0  held",
			"config              #7 reader-1 (+1)     44     2h00m       12s        1  2 readers",
			"jobs/nightly        #12 host-a           41     1m23s      9.0s        2  held",
			"exports             #3 w1 (+2)           40      5.0s       20s        0  3/5 permits",
			"db/migrate          -                    39         -         -        1  lock-delay 4.0s",
			"queue/b             -                     9         -         -        3  free, waited for",
		},
	}, {
		name:  "height 8: what does not fit is counted",
		state: cluster(), view: View{Height: 8, Sort: ByWaiters}, now: t0,
		want: []string{
			"leader n1, 3 members: n1 n2 n3 (unreachable: n3)",
			"5 locks, 3 held, 7 waiting, 2.5 grants/s, sorted by waiters (watch, every 1s)",
			"",
			"LOCK          HOLDER            TOKEN  HELD FOR  TTL LEFT  WAITERS  STATE",
			"queue/b       -                     9         -         -        3  free, waited for",
			"jobs/nightly  #12 host-a           41     1m23s      9.0s        2  held",
			"config        #7 reader-1 (+1)     44     2h00m       12s        1  2 readers",
			"... 2 more",
		},
	}, {
		name:  "-n 2 by name, no rate on a snapshot",
		state: func() State { s := cluster(); s.Source = Once; return s }(), view: View{Rows: 2, Sort: ByName}, now: t0,
		want: []string{
			"leader n1, 3 members: n1 n2 n3 (unreachable: n3)",
			"5 locks, 3 held, 7 waiting, sorted by name",
			"",
			"LOCK        HOLDER            TOKEN  HELD FOR  TTL LEFT  WAITERS  STATE",
			"config      #7 reader-1 (+1)     44     2h00m       12s        1  2 readers",
			"db/migrate  -                    39         -         -        1  lock-delay 4.0s",
			"... 3 more",
		},
	}, {
		name:  "empty, under a prefix, rate unknown, members unknown, last read failed",
		state: State{Prefix: "jobs/", Source: Poll, Interval: 2 * time.Second, GrantRate: -1, MembersErr: errors.New("members: denied"), Err: errors.New("list locks: unavailable\nretrying")},
		now:   t0,
		want: []string{
			"members: unknown (members: denied)",
			"0 locks, 0 held, 0 waiting, - grants/s, prefix jobs/, sorted by held (poll, every 2s)",
			`error: list locks: unavailable\nretrying`,
			"LOCK  HOLDER  TOKEN  HELD FOR  TTL LEFT  WAITERS  STATE",
			"(no lock under jobs/ is held, delayed or waited for)",
		},
	}, {
		name:  "names and owners that are not printable ASCII are quoted",
		state: hostile, view: View{Sort: ByName}, now: t0,
		want: []string{
			"leader n1, 1 member: n1",
			"1 lock, 1 held, 0 waiting, sorted by name",
			"",
			`LOCK               HOLDER        TOKEN  HELD FOR  TTL LEFT  WAITERS  STATE`,
			`"evil\x1b[2Jname"  #1 "own\ner"      1      1.0s      1.0s        0  held`,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Render(tt.state, tt.view, tt.now)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for i, line := range got {
				if tt.view.Width > 0 && cols(line) > tt.view.Width {
					t.Errorf("line %d is %d columns, wider than %d", i, cols(line), tt.view.Width)
				}
			}
			if tt.view.Height > 0 && len(got) > tt.view.Height {
				t.Errorf("%d lines, more than %d", len(got), tt.view.Height)
			}
		})
	}
}

// TestRenderSorts: each order, ties by name; a lock held for an unknown
// time sorts after those whose hold time is known.
func TestRenderSorts(t *testing.T) {
	s := State{Read: t0, Locks: []client.LockInfo{
		mutex("b", 1, "x", 5, time.Second, 0, 1), // held, hold time unknown
		mutex("a", 2, "x", 7, time.Second, 3*time.Second, 0),
		mutex("d", 3, "x", 6, time.Second, 3*time.Second, 4),
		mutex("c", 4, "x", 2, time.Second, 9*time.Second, 1),
	}}
	for _, tt := range []struct {
		order Sort
		want  string
	}{{ByHeld, "c a d b"}, {"", "c a d b"}, {ByWaiters, "d b c a"}, {ByName, "a b c d"}, {ByToken, "a d b c"}} {
		lines := Render(s, View{Sort: tt.order}, t0)[4:]
		var names []string
		for _, l := range lines {
			names = append(names, strings.Fields(l)[0])
		}
		if got := strings.Join(names, " "); got != tt.want {
			t.Errorf("sort %q: %s, want %s", tt.order, got, tt.want)
		}
	}
}

func TestParseSort(t *testing.T) {
	for _, s := range []string{"held", "waiters", "name", "token"} {
		if got, err := ParseSort(s); err != nil || string(got) != s {
			t.Errorf("ParseSort(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseSort("ttl"); err == nil || err.Error() != `unknown sort "ttl": use one of held, waiters, name, token` {
		t.Errorf("ParseSort(ttl): %v", err)
	}
}

func TestSemaphoreInLockDelay(t *testing.T) {
	// The first permit's holder expired: the row shows the next holder.
	l := client.LockInfo{Name: "pool", Token: 3, Permits: 3, Grants: []client.GrantInfo{
		{Token: 3, Delayed: true, DelayLeft: time.Second},
		{HolderLease: 6, HolderOwner: "w6", Token: 4, Slot: 1, TTLLeft: 5 * time.Second, HeldFor: 12 * time.Second}}}
	got := Render(State{Read: t0, Locks: []client.LockInfo{l}}, View{}, t0)[4]
	if want := "pool  #6 w6       4       12s      5.0s        0  1/3 permits, 1 in lock-delay"; got != want {
		t.Errorf("row %q\nwant %q", got, want)
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                          "0.0s",
		99 * time.Millisecond:      "0.0s",
		9999 * time.Millisecond:    "9.9s",
		10 * time.Second:           "10s",
		59*time.Second + 999:       "59s",
		time.Minute:                "1m00s",
		61*time.Minute + time.Hour: "2h01m",
		49*time.Hour + time.Minute: "2d01h",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestShorten(t *testing.T) {
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{{"abcdef", 6, "abcdef"}, {"abcdefgh", 6, "abc…gh"}, {"abcdefgh", 5, "ab…gh"}, {"abc", 1, "a"}, {"abc", 0, ""}} {
		if got := shorten(tt.s, tt.n); got != tt.want {
			t.Errorf("shorten(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
