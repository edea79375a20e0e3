package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

func TestWaitLine(t *testing.T) {
	queue := []client.Waiter{{Lease: 4, Owner: "b"}, {Lease: 7, Owner: "me"}, {Lease: 9, Owner: "c"}}
	for _, tt := range []struct {
		name    string
		info    client.LockInfo
		lease   uint64
		want    string
		granted bool
	}{
		{name: "held", info: client.LockInfo{HolderLease: 2, HolderOwner: "host/12", Token: 5, Waiters: 3, Queue: queue}, lease: 7,
			want: `fence: waiting for "jobs/x": held by lease #2 (owner "host/12"), token 5, position 2 of 3`},
		{name: "first", info: client.LockInfo{HolderLease: 2, HolderOwner: "host/12", Token: 5, Waiters: 3, Queue: queue}, lease: 4,
			want: `fence: waiting for "jobs/x": held by lease #2 (owner "host/12"), token 5, position 1 of 3`},
		{name: "in lock-delay", info: client.LockInfo{Token: 5, Delayed: true, DelayLeft: 2460 * time.Millisecond, LockDelay: 5 * time.Second, Queue: queue[1:]}, lease: 7,
			want: `fence: waiting for "jobs/x": free after its holder's lease expired (token 5), position 1 of 2, lock-delay 2.5s left`},
		{name: "lock-delay due", info: client.LockInfo{Token: 5, Delayed: true, Queue: queue[2:]}, lease: 9,
			want: `fence: waiting for "jobs/x": free after its holder's lease expired (token 5), position 1 of 1, lock-delay 0s left`},
		{name: "free", info: client.LockInfo{Token: 5, Queue: queue[2:]}, lease: 9,
			want: `fence: waiting for "jobs/x": free, position 1 of 1`},
		{name: "not queued yet", info: client.LockInfo{HolderLease: 2, Token: 5, Queue: queue}, lease: 8, want: ""},
		{name: "granted", info: client.LockInfo{HolderLease: 7, Token: 6, Queue: queue[2:]}, lease: 7, want: "", granted: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, granted := waitLine("jobs/x", tt.info, tt.lease)
			if got != tt.want || granted != tt.granted {
				t.Errorf("waitLine = %q, %v\nwant       %q, %v", got, granted, tt.want, tt.granted)
			}
		})
	}
	// Another client's owner label (or a lock name) cannot drive the terminal.
	got, _ := waitLine("a\x1b[2Jb", client.LockInfo{HolderLease: 2, HolderOwner: "x\r\x1b[Kévil", Queue: queue}, 4)
	if want := `fence: waiting for "a\x1b[2Jb": held by lease #2 (owner "x\r\x1b[K\u00e9vil"), token 0, position 1 of 3`; got != want {
		t.Errorf("escapes:\n got %q\nwant %q", got, want)
	}
}

func TestCut(t *testing.T) {
	for _, tt := range []struct {
		line  string
		width int
		want  string
	}{{"abcdef", 0, "abcdef"}, {"abcdef", 7, "abcdef"}, {"abcdef", 6, "abcde"}, {"abcdef", 4, "abc"}, {"abcdef", 1, "abcdef"}} {
		if got := cut(tt.line, tt.width); got != tt.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tt.line, tt.width, got, tt.want)
		}
	}
}

// waitUntil polls cond until it holds (no time bound: the test's own
// deadline catches a hang).
func waitUntil(cond func() bool) {
	for !cond() {
		time.Sleep(5 * time.Millisecond)
	}
}

// expectOutput waits until out holds want or has gone another way, and
// fails in the second case. (A reader may see a write in pieces.)
func expectOutput(t *testing.T, what string, out *locktest.LogBuffer, want string) {
	t.Helper()
	waitUntil(func() bool { got := out.String(); return len(got) >= len(want) || !strings.HasPrefix(want, got) })
	if got := out.String(); got != want {
		t.Fatalf("%s: %q\nwant %q", what, got, want)
	}
}

// dialTest is a client of the test server at addr, with owner as its label.
func dialTest(t *testing.T, addr, owner string) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), []string{addr}, client.WithInsecure(), client.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLockWaitingWithoutTerminal: a 'fence lock' that waits, its stderr no
// terminal, prints exactly one line when the wait begins, and nothing more
// as the queue ahead of it shrinks; the exports go to stdout as ever.
// fence status lists the queue meanwhile.
func TestLockWaitingWithoutTerminal(t *testing.T) {
	addr := locktest.Start(t).GRPCAddr()
	holder, err := dialTest(t, addr, "holder").Lock(context.Background(), "q") // lease #1
	if err != nil {
		t.Fatal(err)
	}
	reader := dialTest(t, addr, "reader")
	waiters := func(n int) func() bool {
		return func() bool {
			info, err := reader.Status(context.Background(), "q")
			return err == nil && info.Waiters == n
		}
	}
	lock := func(ctx context.Context, owner string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := dialTest(t, addr, owner).Lock(ctx, "q")
			done <- err
		}()
		return done
	}
	aheadCtx, aheadLeaves := context.WithCancel(context.Background())
	defer aheadLeaves()
	ahead := lock(aheadCtx, "ahead") // lease #2
	waitUntil(waiters(1))

	var stdout bytes.Buffer
	var stderr locktest.LogBuffer
	code := make(chan int, 1)
	go func() { // lease #3
		code <- Run(context.Background(), []string{"--insecure", "--server", addr, "lock", "q", "--wait", "1m", "--owner", "script"},
			strings.NewReader(""), &stdout, &stderr)
	}()
	const line = `fence: waiting for "q": held by lease #1 (owner "holder"), token 1, position 2 of 2` + "\n"
	expectOutput(t, "stderr", &stderr, line)

	laterCtx, laterLeaves := context.WithCancel(context.Background())
	defer laterLeaves()
	later := lock(laterCtx, "later") // lease #4
	waitUntil(waiters(3))
	if code, out, _ := fence(t, addr, "status", "q"); code != 0 ||
		!strings.HasSuffix(out, "3 waiting\n  1. lease #2 (owner \"ahead\")\n  2. lease #3 (owner \"script\")\n  3. lease #4 (owner \"later\")\n") {
		t.Fatalf("status: %d\n%s", code, out)
	}
	var st lockJSON
	if code, out, _ := fence(t, addr, "status", "q", "--json"); code != 0 || json.Unmarshal([]byte(out), &st) != nil ||
		fmt.Sprint(st.Queue) != "[{2 ahead false} {3 script false} {4 later false}]" || st.DelayLeftSeconds != nil || strings.Contains(out, "delay_left") {
		t.Fatalf("status --json: %d\n%s", code, out)
	}

	aheadLeaves() // the queue ahead shrinks: a terminal would show it, a log gets no second line
	if err := <-ahead; !errors.Is(err, context.Canceled) {
		t.Fatalf("ahead: %v", err)
	}
	waitUntil(waiters(2))
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-code; got != 0 {
		t.Fatalf("exit %d: %s", got, stderr.String())
	}
	if got := stderr.String(); got != line {
		t.Fatalf("stderr %q, want exactly the one line %q", got, line)
	}
	if e := env(stdout.String()); e["FENCE_TOKEN"] != "2" || e["FENCE_LOCK"] != "q" {
		t.Fatalf("stdout %q", stdout.String())
	}
	laterLeaves()
	<-later
}

// TestLockGrantedAtOnceShowsNothing: a free lock is granted without a word
// about waiting (the display never shows a line it has no queue for).
func TestLockGrantedAtOnceShowsNothing(t *testing.T) {
	addr := locktest.Start(t).GRPCAddr()
	code, _, stderr := fence(t, addr, "run", "q", "--wait", "1m", "--", "true")
	if code != 0 || stderr != `fence: acquired "q" with token 1; running true`+"\n" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// scripted is a lock read that answers what the test sends it, one read
// per send, and blocks until then (or until the display stops).
type scripted chan client.LockInfo

func (s scripted) status(ctx context.Context, _ string) (client.LockInfo, error) {
	select {
	case info := <-s:
		return info, nil
	case <-ctx.Done():
		return client.LockInfo{}, ctx.Err()
	}
}

// TestWaitDisplay drives the display through scripted reads on a fake
// clock: on a terminal it writes a line only when it changes and erases it
// when stopped or granted; without one it writes one line and reads no
// more; stop ends its goroutine even while a read hangs, and a display
// never started (no wait) writes nothing.
func TestWaitDisplay(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	held := func(queue ...uint64) client.LockInfo {
		info := client.LockInfo{HolderLease: 2, HolderOwner: "h", Token: 9}
		for _, n := range queue {
			info.Queue = append(info.Queue, client.Waiter{Lease: n, Owner: fmt.Sprint("w", n)})
		}
		return info
	}
	const (
		second = clearLine + `fence: waiting for "q": held by lease #2 (owner "h"), token 9, position 2 of 2`
		first  = clearLine + `fence: waiting for "q": held by lease #2 (owner "h"), token 9, position 1 of 1`
	)
	start := func(tty bool, width ...int) (*waitDisplay, scripted, *clocktest.Fake, *locktest.LogBuffer) {
		reads, clk, out := make(scripted), clocktest.New(), &locktest.LogBuffer{}
		w := newWaitDisplay(out, tty, append(width, 0)[0], "q", reads.status, clk, time.Second)
		return w, reads, clk, out
	}
	t.Run("terminal, stopped while a read hangs", func(t *testing.T) {
		w, reads, clk, out := start(true)
		w.waiting(7)
		reads <- held(4) // not queued yet: nothing
		clk.Advance(time.Second)
		reads <- held(4, 7) // queued second
		expectOutput(t, "terminal", out, second)
		clk.Advance(time.Second)
		reads <- held(4, 7) // no change: nothing written
		clk.Advance(time.Second)
		reads <- held(7)
		expectOutput(t, "terminal", out, second+first)
		clk.Advance(time.Second) // the next read (under way, or about to be) never answers
		w.stop()
		if got := out.String(); got != second+first+clearLine {
			t.Fatalf("after stop: %q", got)
		}
	})
	t.Run("terminal, granted", func(t *testing.T) {
		w, reads, clk, out := start(true)
		w.waiting(7)
		reads <- held(7)
		expectOutput(t, "terminal", out, first)
		clk.Advance(time.Second)
		reads <- client.LockInfo{HolderLease: 7, Token: 10} // granted: the display ends by itself
		<-w.done
		w.stop()
		if got := out.String(); got != first+clearLine {
			t.Fatalf("after the grant: %q", got)
		}
	})
	t.Run("terminal narrower than the line", func(t *testing.T) {
		w, reads, _, out := start(true, 40)
		w.waiting(7)
		reads <- held(7)
		expectOutput(t, "terminal", out, clearLine+`fence: waiting for "q": held by lease #`) // 39 columns
		w.stop()
	})
	t.Run("no terminal", func(t *testing.T) {
		w, reads, clk, out := start(false)
		w.waiting(7)
		reads <- held(4)
		clk.Advance(time.Second)
		reads <- held(4, 7)
		<-w.done // one line, then no more reads
		w.stop()
		if want := strings.TrimPrefix(second, clearLine) + "\n"; out.String() != want {
			t.Fatalf("output %q, want %q", out.String(), want)
		}
	})
	t.Run("never waited", func(t *testing.T) {
		w, _, _, out := start(true)
		w.stop()
		w.waiting(7) // a report after stop starts nothing
		if w.done != nil || out.String() != "" {
			t.Fatalf("started %v, output %q", w.done != nil, out.String())
		}
	})
}

// TestStatusShowsLockDelayLeft: while a lock waits out its lock-delay,
// fence status says how much is left (and ls leaves queues out).
func TestStatusShowsLockDelayLeft(t *testing.T) {
	addr := locktest.Start(t, func(c *server.Config) { c.MinTTL = 200 * time.Millisecond }).GRPCAddr()
	if code, _, errOut := fence(t, addr, "lock", "d", "--ttl", "200ms", "--lock-delay", "10m"); code != 0 {
		t.Fatalf("lock: %d %s", code, errOut)
	}
	var st lockJSON
	waitUntil(func() bool {
		_, out, _ := fence(t, addr, "status", "d", "--json")
		return json.Unmarshal([]byte(out), &st) == nil && st.Delayed
	})
	if st.DelayLeftSeconds == nil || *st.DelayLeftSeconds <= 9*60 || *st.DelayLeftSeconds > 10*60 || st.Queue != nil {
		t.Fatalf("status --json in lock-delay: %+v", st)
	}
	code, out, _ := fence(t, addr, "status", "d")
	if code != 0 || !strings.HasPrefix(out, "d: free but in lock-delay after its holder's lease expired (last token 1), lock-delay 9m") ||
		!strings.HasSuffix(out, "s left, 0 waiting\n") {
		t.Fatalf("status: %d %q", code, out)
	}
	var ls []lockJSON
	if code, out, _ := fence(t, addr, "ls", "--json"); code != 0 || json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 1 ||
		ls[0].DelayLeftSeconds == nil || *ls[0].DelayLeftSeconds <= 9*60 || *ls[0].DelayLeftSeconds > 10*60 || strings.Contains(out, "queue") {
		t.Fatalf("ls --json: %d %s", code, out)
	}
}
