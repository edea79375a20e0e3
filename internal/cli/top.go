package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/top"
)

// Escape sequences of the live view (VT100/xterm; every terminal emulator
// in use knows them).
const (
	enterScreen = "\x1b[?1049h\x1b[?25l" // to the alternate screen, cursor hidden
	leaveScreen = "\x1b[?25h\x1b[?1049l" // cursor shown, back to the main screen as it was
	cursorHome  = "\x1b[H"
	eraseLine   = "\x1b[K" // to the end of the line
	eraseBelow  = "\x1b[J" // to the end of the screen
)

const (
	// topMinGap is the least time between two reads that watch events set
	// off: a busy cluster's stream of events costs one List per topMinGap.
	topMinGap = 100 * time.Millisecond
	// topRateWindow is the window of the grants-per-second figure.
	topRateWindow = 10 * time.Second
)

func newTop(g *globals) *cobra.Command {
	var (
		interval time.Duration
		sortBy   string
		rows     int
		once     bool
	)
	cmd := &cobra.Command{
		Use:   "top [PREFIX]",
		Short: "Show the lock table full-screen, kept up to date: who holds what, for how long, who waits",
		Long: `top shows the locks that are held, delayed or waited for (those whose names
start with PREFIX, if given) as a table that fills the terminal and is
redrawn in place: holder (lease number and owner), token, how long it has
been held, TTL left, waiters, and state (held, lock-delay, free with
waiters; a semaphore's permits taken, a read-write lock's readers). The
header names the leader and the members, and counts locks, waiters and
grants per second.

It follows the locks with a watch and redraws on each change (at most
every 100ms), and reads them again every --interval; if the watch is
refused (a policy that lets this client read only some names), it reads
every --interval only. q or Ctrl-C quits and gives the screen back.

Without a terminal (output to a pipe or a file), or with --once, it prints
the table once as plain text, at full width, and exits: three header
lines, the column titles, then one lock a line.`,
		Example: "  fence top\n  fence top jobs/ --sort waiters\n  fence top --once -n 20 | tail -n +5",
		Args:    usage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			order, err := top.ParseSort(sortBy)
			if err != nil {
				return usageError(cmd, fmt.Errorf("--sort: %w", err))
			}
			if rows < 0 {
				return usageError(cmd, fmt.Errorf("-n %d: the number of rows cannot be negative (0: as many as fit)", rows))
			}
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return g.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				out := cmd.OutOrStdout()
				width, _, tty := terminalSize(out)
				view := top.View{Rows: rows, Sort: order}
				src := clientSource(c)
				if once || !tty {
					if tty {
						view.Width = width
					}
					return topOnce(ctx, src, out, prefix, view, clock.Real{})
				}
				return topLive(ctx, cmd.InOrStdin(), out, &liveTop{src: src, prefix: prefix, view: view, interval: interval, clk: clock.Real{}})
			})
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "read the locks again this often (and on each change the watch reports)")
	cmd.Flags().StringVar(&sortBy, "sort", string(top.ByHeld), "order of the rows: held (longest first), waiters (most first), name, token (latest grant first)")
	cmd.Flags().IntVarP(&rows, "rows", "n", 0, "show at most this many locks (0: as many as fit the terminal; all of them without one)")
	cmd.Flags().BoolVar(&once, "once", false, "print the table once as plain text and exit (what top does without a terminal)")
	positive(cmd.Flags(), "interval")
	return cmd
}

// topSource is what top reads: a client's calls, or a test's stand-ins.
type topSource struct {
	list    func(ctx context.Context) ([]client.LockInfo, error)
	members func(ctx context.Context) ([]client.Member, error)
	// watch follows every lock under prefix; the channel closes when the
	// watch ends (ctx ending, or an error).
	watch func(ctx context.Context, prefix string) (<-chan client.LockEvent, error)
}

// clientSource reads through c.
func clientSource(c *client.Client) topSource {
	return topSource{
		list: c.List,
		members: func(ctx context.Context) ([]client.Member, error) {
			m, _, err := c.Members(ctx)
			return m, err
		},
		watch: func(ctx context.Context, prefix string) (<-chan client.LockEvent, error) {
			w, err := c.Watch(ctx, prefix, client.WatchPrefix())
			if err != nil {
				return nil, err
			}
			return w.Events(), nil
		},
	}
}

// read reads the locks under prefix and the members into s. A failed
// members read is shown in the header; a failed list is returned (s keeps
// the locks it had).
func (src topSource) read(ctx context.Context, s *top.State, prefix string, clk clock.Clock) error {
	sent := clk.Now() // the TTLs count down from before the call: never more than is left
	all, err := src.list(ctx)
	if err != nil {
		return err
	}
	s.Read = sent
	s.Locks = s.Locks[:0]
	for _, l := range all {
		if strings.HasPrefix(l.Name, prefix) {
			s.Locks = append(s.Locks, l)
		}
	}
	s.Members, s.MembersErr = src.members(ctx)
	return nil
}

// topOnce prints one frame as plain text.
func topOnce(ctx context.Context, src topSource, out io.Writer, prefix string, view top.View, clk clock.Clock) error {
	s := top.State{Prefix: prefix, Source: top.Once}
	if err := src.read(ctx, &s, prefix, clk); err != nil {
		return err
	}
	_, err := io.WriteString(out, strings.Join(top.Render(s, view, clk.Now()), "\n")+"\n")
	return err
}

// topLive runs the live view on the terminal out until q (read from in,
// when it is a terminal: in raw mode, given back as it was), Ctrl-C,
// SIGINT, SIGTERM, or ctx ending; the screen is given back in every case.
func topLive(ctx context.Context, in io.Reader, out io.Writer, t *liveTop) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, quit := context.WithCancel(ctx)
	defer quit()
	if f, ok := in.(*os.File); ok && isTerminal(f) {
		restore, err := readKeys(f, quit)
		if err != nil {
			return err
		}
		defer restore()
	}
	resized := make(chan os.Signal, 1)
	signal.Notify(resized, syscall.SIGWINCH)
	defer signal.Stop(resized)
	t.out, t.resized = out, resized
	t.size = func() (int, int) { return screenSize(out) }
	if _, err := io.WriteString(out, enterScreen); err != nil {
		return err
	}
	err := t.run(ctx)
	if _, werr := io.WriteString(out, leaveScreen); err == nil {
		err = werr
	}
	return err
}

// readKeys puts the terminal f in raw mode and reads it until q, Q or
// Ctrl-C (raw mode delivers it as a byte), which calls quit. restore gives
// the terminal its mode back and ends the reading (at once where f takes a
// read deadline, as a terminal opened by the process does; a blocked read
// of the process's own stdin ends with the process).
func readKeys(f *os.File, quit func()) (restore func(), err error) {
	var old *term.State
	err = withFd(f, func(fd int) (err error) {
		old, err = term.MakeRaw(fd)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("terminal: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 64)
		for {
			n, err := f.Read(b)
			for _, k := range b[:n] {
				if k == 'q' || k == 'Q' || k == 3 {
					quit()
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return func() {
		if f.SetReadDeadline(time.Now()) == nil {
			<-done
		}
		_ = f.SetReadDeadline(time.Time{})
		_ = withFd(f, func(fd int) error { return term.Restore(fd, old) })
	}, nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	tty := false
	_ = withFd(f, func(fd int) error { tty = term.IsTerminal(fd); return nil })
	return tty
}

// screenSize is the terminal out's size, else $COLUMNS and $LINES, else 80
// by 24.
func screenSize(out io.Writer) (width, height int) {
	width, height, _ = terminalSize(out)
	if width <= 0 {
		width = envInt("COLUMNS", 80)
	}
	if height <= 0 {
		height = envInt("LINES", 24)
	}
	return width, height
}

// envInt is the positive number in $name, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// liveTop is the state of a live view. Its run loop is its only user.
type liveTop struct {
	src      topSource
	prefix   string
	view     top.View
	interval time.Duration
	clk      clock.Clock
	out      io.Writer
	size     func() (width, height int) // the terminal's, measured at each frame
	resized  <-chan os.Signal           // a redraw at the new size (nil: none)
}

// run reads and draws until ctx ends: at once, every interval, and (at most
// every topMinGap) after each watch event. A failed read is shown in the
// header, above the last locks read, and tried again at the next tick.
func (t *liveTop) run(ctx context.Context) error {
	s := top.State{Prefix: t.prefix, Source: top.Watch, Interval: t.interval}
	rate := top.NewRate(t.clk.Now(), topRateWindow)
	events, err := t.src.watch(ctx, t.prefix)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		s.Source = top.Poll
	}
	tick := t.clk.NewTicker(t.interval)
	defer tick.Stop()
	soon := t.clk.NewTimer(time.Hour)
	soon.Stop()
	pending := false // soon is set
	var last time.Time
	refresh := func() error {
		last = t.clk.Now()
		s.Err = t.src.read(ctx, &s, t.prefix, t.clk)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.Source == top.Poll && s.Err == nil {
			var highest uint64
			for _, l := range s.Locks {
				highest = max(highest, l.Token)
			}
			rate.Token(s.Read, highest)
		}
		return t.draw(&s, rate)
	}
	if err := refresh(); err != nil {
		return quiet(err)
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			err = refresh()
		case <-soon.C():
			pending = false
			err = refresh()
		case <-t.resized:
			err = t.draw(&s, rate)
		case e, ok := <-events:
			switch {
			case !ok && ctx.Err() != nil:
				return nil
			case !ok: // the watch ended: poll from here on
				events, s.Source = nil, top.Poll
				rate = top.NewRate(t.clk.Now(), topRateWindow)
				err = t.draw(&s, rate)
			default:
				if e.Type == client.Granted {
					rate.Grants(t.clk.Now(), 1)
				}
				if !pending {
					pending = true
					soon.Reset(max(topMinGap-clock.Since(t.clk, last), 0))
				}
			}
		}
		if err != nil {
			return quiet(err)
		}
	}
}

// quiet is nil for the end of the view's context (a quit), else err.
func quiet(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// draw writes a frame of s over the screen, at its current size.
func (t *liveTop) draw(s *top.State, rate *top.Rate) error {
	now := t.clk.Now()
	s.GrantRate = rate.PerSecond(now)
	v := t.view
	v.Width, v.Height = t.size()
	v.Width-- // nothing in the last column: a terminal may wrap there at once
	lines := top.Render(*s, v, now)
	frame := cursorHome + strings.Join(lines, eraseLine+"\r\n") + eraseLine + eraseBelow
	_, err := io.WriteString(t.out, frame)
	return err
}
