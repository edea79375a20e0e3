package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock"
)

// waitEvery is how often a terminal's waiting line reads the lock again: its
// rate of updates, and of GetLock calls per waiting terminal (a process
// without a terminal reads only until it has printed its one line).
const waitEvery = 500 * time.Millisecond

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\x1b[K"

// waitDisplay shows where a waiting 'fence run' or 'fence lock' stands in
// the lock's queue, on its stderr. On a terminal it keeps one line up to
// date in place (at most every waitEvery) and erases it when the wait ends;
// otherwise it prints one line when the wait begins. It reads the lock with
// GetLock (client.Status) and finds itself by the lease number the client
// reports before it sends its waiting Acquire (client.WithWaiting).
//
// Lifecycle: option goes to the Lock call; the display starts at the
// client's report (never for a lock granted at once by TryLock) and stop,
// called as the Lock call returns, ends it and waits for its goroutine.
// option and stop are called from the goroutine that calls Lock.
type waitDisplay struct {
	out    io.Writer
	tty    bool // out is a terminal: update one line in place
	width  int  // the terminal's columns (0: unknown); a longer line is cut
	name   string
	status func(ctx context.Context, name string) (client.LockInfo, error)
	clk    clock.Clock
	every  time.Duration

	lease  atomic.Uint64 // the lease that waits (it changes if the client waits again under a new one)
	ctx    context.Context
	cancel context.CancelFunc
	start  sync.Once
	done   chan struct{} // closed when the display's goroutine ends; nil if it never started
}

// showWaiting returns the display of a wait for name by c, on out (stderr).
func showWaiting(out io.Writer, c *client.Client, name string) *waitDisplay {
	width, tty := terminal(out)
	return newWaitDisplay(out, tty, width, name, c.Status, clock.Real{}, waitEvery)
}

func newWaitDisplay(out io.Writer, tty bool, width int, name string,
	status func(context.Context, string) (client.LockInfo, error), clk clock.Clock, every time.Duration) *waitDisplay {
	ctx, cancel := context.WithCancel(context.Background())
	return &waitDisplay{out: out, tty: tty, width: width, name: name, status: status, clk: clk, every: every, ctx: ctx, cancel: cancel}
}

// option is the client option that starts the display when the wait begins.
func (w *waitDisplay) option() client.Option { return client.WithWaiting(w.waiting) }

// waiting is the client's report that lease is about to wait: the display
// starts (once; a later report only changes the lease it looks for).
func (w *waitDisplay) waiting(lease uint64) {
	w.lease.Store(lease)
	w.start.Do(func() {
		w.done = make(chan struct{})
		go w.run()
	})
}

// stop ends the display (erasing its line on a terminal) and returns once
// its goroutine has ended. Call it as soon as the Lock call returns.
func (w *waitDisplay) stop() {
	w.cancel()
	w.start.Do(func() {}) // nothing starts after stop
	if w.done != nil {
		<-w.done
	}
}

// run reads the lock and shows the line until stopped (on a terminal) or
// until it has printed its one line (otherwise). An error other than the
// stop (the read is refused) ends the display: it would never show.
func (w *waitDisplay) run() {
	defer close(w.done)
	shown := ""
	defer func() {
		if shown != "" {
			fmt.Fprint(w.out, clearLine)
		}
	}()
	tick := w.clk.NewTicker(w.every)
	defer tick.Stop()
	for {
		info, err := w.status(w.ctx, w.name)
		if err != nil {
			return
		}
		line, granted := waitLine(w.name, info, w.lease.Load())
		switch {
		case granted:
			return
		case line == "": // not queued yet (or waiting again under a new lease)
		case !w.tty:
			fmt.Fprintln(w.out, line)
			return
		case line != shown:
			fmt.Fprint(w.out, clearLine+cut(line, w.width))
			shown = line
		}
		select {
		case <-w.ctx.Done():
			return
		case <-tick.C():
		}
	}
}

// waitLine is the line of lease waiting for lock name as info shows it: ""
// if lease is not in the queue, and granted if it holds the lock.
func waitLine(name string, info client.LockInfo, lease uint64) (line string, granted bool) {
	if info.HolderLease == lease {
		return "", true
	}
	i := slices.IndexFunc(info.Queue, func(w client.Waiter) bool { return w.Lease == lease })
	if i < 0 {
		return "", false
	}
	// %+q: names and owners are anyone's strings; quoted in ASCII, none can
	// move the cursor or write over the terminal.
	var state string
	switch {
	case info.Held():
		state = fmt.Sprintf("held by lease #%d (owner %+q), token %d", info.HolderLease, info.HolderOwner, info.Token)
	case info.Delayed:
		state = fmt.Sprintf("free after its holder's lease expired (token %d)", info.Token)
	default:
		state = "free"
	}
	line = fmt.Sprintf("fence: waiting for %+q: %s, position %d of %d", name, state, i+1, len(info.Queue))
	if info.Delayed {
		line += fmt.Sprintf(", lock-delay %v left", info.DelayLeft.Round(100*time.Millisecond))
	}
	return line, false
}

// cut shortens line to fit a terminal width columns wide (0: unknown), so
// that the carriage return goes back to its start. line is ASCII.
func cut(line string, width int) string {
	if width > 1 && len(line) >= width {
		return line[:width-1]
	}
	return line
}

// terminal reports whether w is a terminal, and its width in columns (0 if
// it does not say).
func terminal(w io.Writer) (width int, ok bool) {
	width, _, ok = terminalSize(w)
	return width, ok
}

// terminalSize reports whether w is a terminal, and its size in columns
// and lines (each 0 if it does not say).
func terminalSize(w io.Writer) (width, height int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile {
		return 0, 0, false
	}
	var ws *unix.Winsize
	err := withFd(f, func(fd int) (err error) {
		ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		return err
	})
	if err != nil {
		return 0, 0, false // ENOTTY: a file, a pipe, /dev/null
	}
	return int(ws.Col), int(ws.Row), true
}

// withFd calls fn with f's file descriptor and returns what either
// returned. Unlike f.Fd, it leaves f as it is: Fd puts f in blocking mode,
// where its read deadlines no longer work.
func withFd(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
