//go:build linux

package cli

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
)

// TestTopOnTerminal: on a terminal, fence top takes the alternate screen,
// shows the table fitted to the terminal's width, redraws it when a lock is
// taken (with an --interval of an hour, only the watch can tell it), and
// on q, then on SIGINT, leaves the alternate screen and gives the terminal
// its mode back.
func TestTopOnTerminal(t *testing.T) {
	ptm, tty, screen := openPTYPair(t)
	const width = 100
	// (Not tty.Fd(): it would put tty in blocking mode, and the view could
	// not stop reading its keys.)
	if err := withFd(tty, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 20, Col: width})
	}); err != nil {
		t.Fatal(err)
	}
	termMode := func() (mode *unix.Termios) {
		t.Helper()
		if err := withFd(tty, func(fd int) (err error) { mode, err = unix.IoctlGetTermios(fd, unix.TCGETS); return err }); err != nil {
			t.Fatal(err)
		}
		return mode
	}
	modeBefore := termMode()
	addr := locktest.Start(t).GRPCAddr()
	ctx := context.Background()
	if _, err := dialTest(t, addr, "alice").Lock(ctx, "jobs/a", client.WithTTL(time.Minute)); err != nil { // lease #1, token 1
		t.Fatal(err)
	}
	start := func() chan int {
		code := make(chan int, 1)
		go func() {
			code <- Run(ctx, []string{"--insecure", "--server", addr, "top", "--interval", "1h"}, tty, tty, &locktest.LogBuffer{})
		}()
		return code
	}
	exited := func(code chan int, how string) {
		t.Helper()
		select {
		case c := <-code:
			if c != 0 {
				t.Fatalf("after %s: exit %d", how, c)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("still running 30s after %s", how)
		}
		// The screen's side reads what was written a little later.
		eventually(t, "after "+how+", leaving the alternate screen", func() bool { return strings.HasSuffix(screen.String(), leaveScreen) })
		if mode := termMode(); mode.Lflag != modeBefore.Lflag || mode.Iflag != modeBefore.Iflag || mode.Oflag != modeBefore.Oflag {
			t.Fatalf("after %s the terminal's mode is %+v, was %+v", how, termMode(), modeBefore)
		}
	}

	code := start()
	eventually(t, "a frame with alice's lock", func() bool { return frameRow(screen.String(), "jobs/a") != nil })
	if s := screen.String(); !strings.HasPrefix(s, enterScreen) {
		t.Fatalf("the screen does not begin with the alternate screen: %q", s[:min(len(s), 40)])
	}
	if mode := termMode(); mode.Lflag&(unix.ECHO|unix.ICANON) != 0 {
		t.Fatalf("while top runs the terminal echoes or reads lines: %#x", mode.Lflag)
	}
	if _, err := dialTest(t, addr, "bob").Lock(ctx, "jobs/b", client.WithTTL(time.Minute)); err != nil { // lease #2, token 2
		t.Fatal(err)
	}
	// name, #lease, owner, token, held for, TTL left, waiters, state
	bobs := func(f []string) bool {
		return len(f) == 8 && f[1] == "#2" && f[2] == "bob" && f[3] == "2" && f[6] == "0" && f[7] == "held"
	}
	eventually(t, "a frame with bob's lock", func() bool { return bobs(frameRow(screen.String(), "jobs/b")) })
	frame := lastFrame(screen.String())
	if !strings.HasPrefix(frame[1], "2 locks, 2 held, 0 waiting,") || !strings.HasSuffix(frame[1], "(watch, every 1h0m0s)") {
		t.Errorf("header: %q", frame[1])
	}
	for _, l := range frame {
		if n := len([]rune(l)); n >= width {
			t.Errorf("a line of %d columns on a terminal %d wide: %q", n, width, l)
		}
	}
	if _, err := ptm.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	exited(code, "q")

	frames := strings.Count(screen.String(), cursorHome)
	code = start()
	eventually(t, "the second run's first frame", func() bool { return strings.Count(screen.String(), cursorHome) > frames })
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited(code, "SIGINT")
}
