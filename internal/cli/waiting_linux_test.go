//go:build linux

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
)

// openPTY opens a pseudo-terminal: the command writes to tty as to a real
// terminal; everything written arrives in out (a goroutine reads the
// other side until the test ends).
func openPTY(t *testing.T) (tty *os.File, out *locktest.LogBuffer) {
	t.Helper()
	_, tty, out = openPTYPair(t)
	return tty, out
}

// openPTYPair is openPTY that also returns the other side, ptm: what is
// written to it, the command reads from tty as typed keys.
func openPTYPair(t *testing.T) (ptm, tty *os.File, out *locktest.LogBuffer) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		ptm.Close()
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		ptm.Close()
		t.Skipf("ptsname: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		ptm.Close()
		t.Skipf("open the terminal's side: %v", err)
	}
	out = &locktest.LogBuffer{}
	read := make(chan struct{})
	go func() {
		defer close(read)
		b := make([]byte, 4096)
		for {
			n, err := ptm.Read(b)
			out.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		tty.Close()
		ptm.Close()
		<-read
	})
	return ptm, tty, out
}

func TestTerminalIsDetected(t *testing.T) {
	tty, _ := openPTY(t)
	if _, ok := terminal(tty); !ok {
		t.Error("a pseudo-terminal is not taken for a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for what, out := range map[string]*os.File{"a file": f, os.DevNull: devNull, "a pipe": w} {
		if _, ok := terminal(out); ok {
			t.Errorf("%s is taken for a terminal", what)
		}
	}
	if _, ok := terminal(&locktest.LogBuffer{}); ok {
		t.Error("a buffer is taken for a terminal")
	}
}

// TestRunWaitingOnTerminal: a 'fence run' that waits, its stderr a
// terminal, keeps one line up to date in place — as a waiter ahead of it
// leaves, and as the holder changes — and erases it when granted, before it
// says it acquired the lock.
func TestRunWaitingOnTerminal(t *testing.T) {
	tty, screen := openPTY(t)
	addr := locktest.Start(t).GRPCAddr()
	holder, err := dialTest(t, addr, "a").Lock(context.Background(), "q") // lease #1
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
	type grant struct {
		lease *client.Lease
		err   error
	}
	bGot := make(chan grant, 1)
	go func() {
		l, err := dialTest(t, addr, "b").Lock(context.Background(), "q") // lease #2
		bGot <- grant{l, err}
	}()
	waitUntil(waiters(1))
	xCtx, xLeaves := context.WithCancel(context.Background())
	defer xLeaves()
	xGot := make(chan error, 1)
	go func() {
		_, err := dialTest(t, addr, "x").Lock(xCtx, "q") // lease #3
		xGot <- err
	}()
	waitUntil(waiters(2))

	code := make(chan int, 1)
	go func() { // lease #4
		code <- Run(context.Background(), []string{"--insecure", "--server", addr, "run", "q", "--wait", "1m", "--owner", "c", "--", "true"},
			strings.NewReader(""), &locktest.LogBuffer{}, tty)
	}()
	const (
		first   = "\r\x1b[K" + `fence: waiting for "q": held by lease #1 (owner "a"), token 1, position 3 of 3`
		xLeft   = "\r\x1b[K" + `fence: waiting for "q": held by lease #1 (owner "a"), token 1, position 2 of 2`
		bHolds  = "\r\x1b[K" + `fence: waiting for "q": held by lease #2 (owner "b"), token 2, position 1 of 1`
		granted = "\r\x1b[K" + `fence: acquired "q" with token 3; running true` + "\r\n"
	)
	expectOutput(t, "the terminal", screen, first)
	xLeaves()
	if err := <-xGot; !errors.Is(err, context.Canceled) {
		t.Fatalf("x: %v", err)
	}
	expectOutput(t, "after a waiter ahead left, the terminal", screen, first+xLeft)
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := <-bGot
	if b.err != nil {
		t.Fatal(b.err)
	}
	expectOutput(t, "after the holder changed, the terminal", screen, first+xLeft+bHolds)
	if err := b.lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-code; got != 0 {
		t.Fatalf("exit %d; terminal %q", got, screen.String())
	}
	expectOutput(t, "once granted, the terminal", screen, first+xLeft+bHolds+granted)
}
