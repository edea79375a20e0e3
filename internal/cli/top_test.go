package cli

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/locktest"
)

// topRows parses the rows of a 'fence top --once' table (after its three
// header lines and the column titles) into their fields, by lock name.
func topRows(t *testing.T, out string) map[string][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[3], "LOCK ") {
		t.Fatalf("no table:\n%s", out)
	}
	rows := map[string][]string{}
	for _, l := range lines[4:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	return rows
}

// TestTopOnce: 'fence top --once' (and fence top into a pipe) prints the
// table of a real server once: each lock's holder, token, waiters and
// state, the members, and only the locks under PREFIX when given.
func TestTopOnce(t *testing.T) {
	addr := startServer(t)
	ctx := context.Background()
	if _, err := dialTest(t, addr, "alice").Lock(ctx, "jobs/a", client.WithTTL(time.Minute)); err != nil { // lease #1, token 1
		t.Fatal(err)
	}
	if _, err := dialTest(t, addr, "bob").Lock(ctx, "jobs/b", client.WithTTL(time.Minute)); err != nil { // lease #2, token 2
		t.Fatal(err)
	}
	carol := dialTest(t, addr, "carol")
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { _, err := carol.Lock(waitCtx, "jobs/b"); waited <- err }() // lease #3 waits
	t.Cleanup(func() { stopWaiting(); <-waited })
	if _, err := dialTest(t, addr, "dave").Semaphore("pool", 3).Acquire(ctx); err != nil { // lease #4, token 3
		t.Fatal(err)
	}
	eventually(t, "carol waits", func() bool {
		info, err := carol.Status(ctx, "jobs/b")
		return err == nil && info.Waiters == 1
	})

	code, out, errOut := fence(t, addr, "top", "--once")
	if code != 0 {
		t.Fatalf("top --once: %d %s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "leader ") || !strings.Contains(lines[0], "1 member:") ||
		lines[1] != "3 locks, 3 held, 1 waiting, sorted by held" {
		t.Fatalf("header:\n%s", out)
	}
	rows := topRows(t, out)
	// name, #lease, owner, token, held for, TTL left, waiters, state…
	for name, want := range map[string][]string{
		"jobs/a": {"#1", "alice", "1", "0", "held"},
		"jobs/b": {"#2", "bob", "2", "1", "held"},
		"pool":   {"#4", "dave", "3", "0", "1/3 permits"},
	} {
		f := rows[name]
		if len(f) < 8 || f[1] != want[0] || f[2] != want[1] || f[3] != want[2] || f[6] != want[3] || strings.Join(f[7:], " ") != want[4] {
			t.Errorf("row of %s: %q, want holder %s %s, token %s, waiters %s, state %q\n%s", name, f, want[0], want[1], want[2], want[3], want[4], out)
		}
	}
	if len(rows) != 3 {
		t.Errorf("%d rows, want 3:\n%s", len(rows), out)
	}

	// Under a prefix, by waiters, at most one row: jobs/b, then the count.
	code, out, _ = fence(t, addr, "top", "jobs/", "--sort", "waiters", "-n", "1")
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || len(lines) != 6 || !strings.HasPrefix(lines[4], "jobs/b ") || lines[5] != "... 1 more" ||
		lines[1] != "2 locks, 2 held, 1 waiting, prefix jobs/, sorted by waiters" {
		t.Fatalf("top jobs/ --sort waiters -n 1: %d\n%s", code, out)
	}
}

// TestTopUsage: bad flags are usage errors (exit 2) that name the flag.
func TestTopUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--interval", "0"}, "--interval 0s: must be positive"},
		{[]string{"--interval", "-1s"}, "--interval -1s: a duration cannot be negative"},
		{[]string{"-n", "-1"}, "-n -1: the number of rows cannot be negative"},
		{[]string{"--sort", "ttl"}, `--sort: unknown sort "ttl": use one of held, waiters, name, token`},
		{[]string{"a/", "b/"}, "accepts at most 1 arg(s), received 2"},
	} {
		// No server listens at this address: usage is checked first.
		code, _, errOut := fence(t, "127.0.0.1:1", append([]string{"top"}, tt.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("top %q: exit %d, %q; want %d and %q", tt.args, code, errOut, ExitUsage, tt.want)
		}
	}
}

// lastFrame is the last frame the live view drew on screen, as lines.
func lastFrame(screen string) []string {
	at := strings.LastIndex(screen, cursorHome)
	if at < 0 {
		return nil
	}
	frame := screen[at+len(cursorHome):]
	frame, _, _ = strings.Cut(frame, eraseBelow)
	return strings.Split(strings.TrimSuffix(frame, eraseLine), eraseLine+"\r\n")
}

// frameRow is the row of lock name in the last frame, as fields.
func frameRow(screen, name string) []string {
	for _, l := range lastFrame(screen) {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}

// eventually waits until cond holds, failing the test after a generous
// while.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s", what)
		}
	}
}

// fakeLocks stands in for a server: one lock, "a", whose token the test
// sets, and a watch that the test either refuses or feeds.
type fakeLocks struct {
	mu     sync.Mutex
	token  uint64
	fail   error                 // the list's answer while set
	events chan client.LockEvent // nil: the watch is refused
}

func (f *fakeLocks) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeLocks) setToken(tok uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.token = tok
}

func (f *fakeLocks) source() topSource {
	return topSource{
		list: func(context.Context) ([]client.LockInfo, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.fail != nil {
				return nil, f.fail
			}
			return []client.LockInfo{{Name: "a", HolderLease: 1, HolderOwner: "x", Token: f.token, TTLLeft: 10 * time.Second, Permits: 1}}, nil
		},
		members: func(context.Context) ([]client.Member, error) {
			return []client.Member{{ID: "n1", Leader: true, Active: true}}, nil
		},
		watch: func(context.Context, string) (<-chan client.LockEvent, error) {
			if f.events == nil {
				return nil, errors.New("permission denied")
			}
			return f.events, nil
		},
	}
}

// startLive runs a live view of src on a fake clock, drawing into the
// returned buffer, until the test ends.
func startLive(t *testing.T, src topSource, interval time.Duration) (*clocktest.Fake, *locktest.LogBuffer) {
	clk, out := clocktest.New(), &locktest.LogBuffer{}
	lt := &liveTop{src: src, interval: interval, clk: clk, out: out, size: func() (int, int) { return 100, 24 }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lt.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the view ended with %v", err)
		}
	})
	return clk, out
}

// TestTopPollsWhenWatchRefused: with the watch refused, the view reads
// the locks at each tick of the interval, says it polls, and counts grants
// per second from the tokens it sees; a failed read is shown above the
// last table read until a read succeeds again.
func TestTopPollsWhenWatchRefused(t *testing.T) {
	locks := &fakeLocks{token: 5}
	clk, out := startLive(t, locks.source(), time.Second)
	eventually(t, "the first frame", func() bool { return frameRow(out.String(), "a") != nil })
	if h := lastFrame(out.String())[1]; h != "1 lock, 1 held, 0 waiting, - grants/s, sorted by held (poll, every 1s)" {
		t.Fatalf("header %q", h)
	}
	locks.setToken(9) // four grants in the second to come
	clk.Advance(time.Second)
	eventually(t, "a frame with token 9", func() bool { f := frameRow(out.String(), "a"); return len(f) > 3 && f[3] == "9" })
	if h := lastFrame(out.String())[1]; h != "1 lock, 1 held, 0 waiting, 4.0 grants/s, sorted by held (poll, every 1s)" {
		t.Fatalf("header %q", h)
	}

	locks.setFail(errors.New("fence: list locks: unavailable"))
	clk.Advance(time.Second)
	eventually(t, "a frame with the error", func() bool {
		f := lastFrame(out.String())
		return len(f) > 4 && f[2] == "error: fence: list locks: unavailable"
	})
	if f := frameRow(out.String(), "a"); len(f) < 4 || f[3] != "9" {
		t.Fatalf("the last table read is not shown under the error: %q", f)
	}
	locks.setFail(nil)
	clk.Advance(time.Second)
	eventually(t, "a frame without the error", func() bool {
		f := lastFrame(out.String())
		return len(f) > 4 && f[2] == "" && frameRow(out.String(), "a") != nil
	})
}

// TestTopRedrawsOnWatchEvents: an event redraws the table soon
// (topMinGap), not at the next interval; when the watch ends the view
// polls from then on.
func TestTopRedrawsOnWatchEvents(t *testing.T) {
	locks := &fakeLocks{token: 5, events: make(chan client.LockEvent, 1)}
	clk, out := startLive(t, locks.source(), time.Hour)
	eventually(t, "the first frame", func() bool { return frameRow(out.String(), "a") != nil })
	locks.setToken(6)
	locks.events <- client.LockEvent{Type: client.Granted, Name: "a", Token: 6}
	clk.BlockUntilArmed(2) // the interval's ticker and the redraw's timer
	clk.Advance(topMinGap)
	eventually(t, "a frame with token 6", func() bool { f := frameRow(out.String(), "a"); return len(f) > 3 && f[3] == "6" })
	if h := lastFrame(out.String())[1]; !strings.HasSuffix(h, "(watch, every 1h0m0s)") {
		t.Fatalf("header %q", h)
	}
	close(locks.events)
	eventually(t, "a frame that says it polls", func() bool {
		f := lastFrame(out.String())
		return len(f) > 1 && strings.HasSuffix(f[1], "(poll, every 1h0m0s)")
	})
}

// TestScreenSize: without a terminal's own size, $COLUMNS and $LINES, else
// 80 by 24.
func TestScreenSize(t *testing.T) {
	t.Setenv("COLUMNS", "70")
	t.Setenv("LINES", "")
	if w, h := screenSize(&locktest.LogBuffer{}); w != 70 || h != 24 {
		t.Errorf("COLUMNS=70: %dx%d, want 70x24", w, h)
	}
	t.Setenv("COLUMNS", "wide")
	t.Setenv("LINES", "50")
	if w, h := screenSize(&locktest.LogBuffer{}); w != 80 || h != 50 {
		t.Errorf("COLUMNS=wide LINES=50: %dx%d, want 80x50", w, h)
	}
}
