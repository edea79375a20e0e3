package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock"
)

func newRun(g *globals) *cobra.Command {
	var (
		h             holdFlags
		wait, oncePer time.Duration
		permits       int
		shared        bool
	)
	cmd := &cobra.Command{
		Use:   "run NAME [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock; stop it if the lock is lost",
		Long: `Run CMD while holding the lock NAME, renewing the lease every TTL/3.

CMD gets FENCE_LOCK (the name), FENCE_TOKEN (the fencing token: pass it to
every write, so storage can refuse a stale holder), FENCE_SIGNED_TOKEN (the
server's signed statement of the grant, for storage that verifies it with
fencing.Verifier; set if the server has a token key) and FENCE_TTL (the
lease's TTL, as --ttl; fence renews it, so CMD need not watch the time) and
FENCE_SLOT (the permit's slot with --permits, 0…N−1; 0 otherwise).

With --permits N, NAME is a semaphore: up to N hosts run CMD at once, each
with its own token and slot (the lowest free), the others wait their turn
(FIFO). Every host must give the same N while anyone holds or waits for
NAME; another N (or none) is refused at once, naming both counts.

With --shared, NAME is a read-write lock and CMD runs as a reader: readers
run together, never beside a writer (a 'fence run NAME' without --shared).
A reader that comes while a writer waits queues behind it, so writers are
never starved. A writer's token is larger than every reader's before it:
storage that checks fence <= $FENCE_TOKEN refuses a late reader's write.

If the lock is held, fence waits up to --wait (default 10m, as 'fence lock'),
then exits 75; --wait 0 fails at once. Waiting means taking turns: when the
holder finishes, the waiting host runs CMD as well.

To run a job once across the fleet (every host's cron starts it), add
--once-per WINDOW. fence records a run whose CMD exits 0, and until WINDOW
has passed after that run finished, every 'fence run --once-per' of NAME
exits 75 with "ran at …, by …, token …", a host that was waiting for that
run included. A run that fails (CMD exits non-zero, or the lease is lost)
records nothing, so a waiting host runs the job instead. The window is
measured by the cluster's log (its leaders' monotonic clocks), never by a
host's clock; it counts from the end of a run, so keep it shorter than the
schedule's period (a nightly job: --once-per 20h). Give every host the same
window.

If renewals keep failing, fence stops CMD before the lease can expire: it sends
SIGTERM when only --grace is left before the local deadline, and SIGKILL at
the deadline (which is a safety margin, TTL/10, before the server could grant
the lock to anyone else). After a pause of fence itself, or a suspend of the
host (the deadline counts on CLOCK_BOOTTIME, which keeps counting while the
host sleeps), it kills CMD at once.
CMD runs in its own process group; both signals go to the whole group.

Exit codes: CMD's own when it finishes; 75 if the lock could not be acquired
(held and --wait ran out) or, with --once-per, the job already ran inside
the window; 76 if the lease was lost and CMD was stopped; 130 if interrupted
(SIGINT, SIGTERM, SIGHUP) while waiting for the lock (it leaves the queue at
once); 69 if no server could be reached; 2 for bad usage; 1 for other errors.`,
		Example: `  # run the nightly job once across the fleet: every host's cron starts this
  # line; the first runs the job, the others exit 75 ("ran at …, by …, token …"),
  # and if the first one's run fails, a host still waiting runs it instead
  fence run jobs/nightly --once-per 20h -- ./nightly.sh

  # take turns: wait up to 10m for the lock, then run (again, after the holder)
  fence run jobs/reindex --ttl 30s --wait 10m -- ./reindex.sh

  # give up at once if another host has it
  fence run jobs/reindex --wait 0 -- ./reindex.sh

  # at most 4 exports at once across the fleet; each fences its own row
  fence run exports --permits 4 -- sh -c './export.sh --slot "$FENCE_SLOT" --fence "$FENCE_TOKEN"'

  # readers run together; 'fence run catalog -- ./rebuild.sh' (a writer) runs alone
  fence run catalog --shared -- ./read-report.sh

  # the job sees its token
  fence run totals/77 -- sh -c 'psql -c "UPDATE totals SET amount=42, fence=$FENCE_TOKEN WHERE id=77 AND fence<=$FENCE_TOKEN"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return &exitError{ExitUsage, errors.New("usage: fence run NAME [flags] -- CMD [ARGS...] (put -- before the command)")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := h.options(cmd)
			if err != nil {
				return err
			}
			if oncePer > 0 {
				opts = append(opts, client.WithOncePer(oncePer))
			}
			if permits < 1 || permits > 1<<16 {
				return usageError(cmd, fmt.Errorf("--permits %d is outside 1…65536", permits))
			}
			if shared && permits > 1 {
				return usageError(cmd, errors.New("--shared is for a read-write lock (one permit); a semaphore (--permits) has no readers"))
			}
			if oncePer > 0 && (permits > 1 || shared) {
				return usageError(cmd, errors.New("--once-per runs CMD once per window, by one holder at a time; with --permits or --shared several hold at once and each would run it"))
			}
			acq := acquirer{name: args[0], permits: permits, shared: shared}
			return runLocked(cmd, g, acq, args[1:], h.ttl, wait, h.grace, opts, oncePer > 0)
		},
	}
	f := cmd.Flags()
	h.register(cmd)
	f.DurationVar(&wait, "wait", defaultWait, "how long to wait for the lock (0: fail at once if held)")
	f.DurationVar(&oncePer, "once-per", 0, "run CMD at most once per this window across all hosts: a run that exits 0 is recorded (0: off)")
	f.IntVar(&permits, "permits", 1, "NAME is a semaphore of N permits: up to N holders run at once (CMD gets FENCE_SLOT)")
	f.BoolVar(&shared, "shared", false, "take NAME's read-write lock as a reader: readers run together, never beside a writer")
	return cmd
}

// acquirer takes a lock in the mode fence run's flags ask for: a mutex, a
// permit of a semaphore, or a reader's grant of a read-write lock.
type acquirer struct {
	name    string
	permits int
	shared  bool
}

func (a acquirer) acquire(ctx context.Context, c *client.Client, wait bool, opts []client.Option) (*client.Lease, error) {
	switch {
	case a.permits > 1 && wait:
		return c.Semaphore(a.name, a.permits).Acquire(ctx, opts...)
	case a.permits > 1:
		return c.Semaphore(a.name, a.permits).TryAcquire(ctx, opts...)
	case a.shared && wait:
		return c.RWLock(a.name).RLock(ctx, opts...)
	case a.shared:
		return c.RWLock(a.name).TryRLock(ctx, opts...)
	case wait:
		return c.Lock(ctx, a.name, opts...)
	}
	return c.TryLock(ctx, a.name, opts...)
}

// holdFlags are the flags of the commands that run a command while they
// hold a lock (run, elect).
type holdFlags struct {
	ttl, grace, lockDelay time.Duration
	owner                 string
}

func (h *holdFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&h.ttl, "ttl", 30*time.Second, "lease TTL; renewed every TTL/3")
	f.DurationVar(&h.grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when the lease is being lost (at most TTL/3 unless set)")
	f.DurationVar(&h.lockDelay, "lock-delay", 0, "if this lease expires, keep the lock from others this long (default: the server's)")
	f.StringVar(&h.owner, "owner", "", "label others see for this holder (default host/pid)")
	positive(f, "ttl")
}

// options checks --grace against --ttl and returns the client options the
// flags ask for.
func (h *holdFlags) options(cmd *cobra.Command) ([]client.Option, error) {
	if !cmd.Flags().Changed("grace") {
		h.grace = min(h.grace, h.ttl/3)
	}
	if h.grace <= 0 || h.grace >= h.ttl-h.ttl/10 {
		return nil, usageError(cmd, fmt.Errorf("--grace %v must be positive and shorter than the TTL minus its 10%% safety margin (%v)", h.grace, h.ttl-h.ttl/10))
	}
	opts := []client.Option{client.WithTTL(h.ttl)}
	if h.owner != "" {
		opts = append(opts, client.WithOwner(h.owner))
	}
	if cmd.Flags().Changed("lock-delay") {
		opts = append(opts, client.WithLockDelay(h.lockDelay))
	}
	return opts, nil
}

// defaultWait is how long lock and run wait for a held lock by default.
const defaultWait = 10 * time.Minute

func runLocked(cmd *cobra.Command, g *globals, acq acquirer, argv []string, ttl, wait, grace time.Duration, opts []client.Option, recordRun bool) error {
	ctx := cmd.Context()
	c, err := g.dial(ctx, opts...)
	if err != nil {
		return err
	}
	defer c.Close()

	in := catchInterrupts(ctx)
	defer in.stop()
	var lease *client.Lease
	err = in.outcome(fmt.Sprintf("waiting for %q", acq.name), func(ictx context.Context) (err error) {
		if wait == 0 {
			lease, err = acq.acquire(ictx, c, false, opts)
			return err
		}
		lctx, cancel := context.WithTimeout(ictx, wait)
		defer cancel()
		shown := showWaiting(cmd.ErrOrStderr(), c, acq.name) // waiting.go: where the wait stands, while it waits
		defer shown.stop()
		lease, err = acq.acquire(lctx, c, true, append(opts, shown.option()))
		return err
	}, func(ctx context.Context) error { return lease.Release(ctx) })
	var ie *exitError
	if errors.As(err, &ie) && ie.code == ExitInterrupted {
		return err
	}
	if err != nil {
		return notAcquired(acq.name, wait, err)
	}
	how := "acquired"
	switch {
	case acq.permits > 1:
		how = fmt.Sprintf("acquired slot %d of", lease.Slot())
	case acq.shared:
		how = "acquired a shared grant of"
	}
	return runHolding(cmd, lease, how, argv, ttl, grace, recordRun)
}

// runHolding runs argv while lease holds (see fence run's help) and
// releases the lease when it finishes (recording the run if recordRun and
// it exited 0); how says how the lease was won, for the log line. Extra
// environment entries go to the command after fence's.
func runHolding(cmd *cobra.Command, lease *client.Lease, how string, argv []string, ttl, grace time.Duration, recordRun bool, env ...string) error {
	ctx, name := cmd.Context(), lease.Name()
	logf := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "fence: "+format+"\n", args...) }
	logf("%s %q with token %d; running %s", how, name, lease.Token(), argv[0])

	child := exec.Command(argv[0], argv[1:]...)
	child.Env = append(os.Environ(), "FENCE_LOCK="+name, "FENCE_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"FENCE_TTL="+ttl.String(), "FENCE_SLOT="+strconv.Itoa(lease.Slot()))
	if signed := lease.SignedToken(); signed != "" {
		child.Env = append(child.Env, "FENCE_SIGNED_TOKEN="+signed)
	}
	child.Env = append(child.Env, env...)
	child.Stdin, child.Stdout, child.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		lease.Release(context.WithoutCancel(ctx))
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	signalGroup := func(sig syscall.Signal) { _ = syscall.Kill(-child.Process.Pid, sig) }

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	w := &watch{clk: clock.Real{}, lease: lease, name: name, prog: argv[0], grace: grace, recordRun: recordRun,
		signalGroup: signalGroup, exited: exited, sigs: sigs, logf: logf}
	return w.run(ctx)
}

// heldLease is what fence run watches: a *client.Lease.
type heldLease interface {
	Done() <-chan struct{}
	Err() error
	Jeopardy() error
	Deadline() time.Time
	Release(context.Context) error
	ReleaseRan(context.Context) error
}

// watch supervises the command while the lease holds.
type watch struct {
	clk         clock.Clock // the clock the client times the lease on (Real: CLOCK_BOOTTIME)
	lease       heldLease
	name, prog  string
	grace       time.Duration
	recordRun   bool // --once-per: a command that exits 0 is released with ReleaseRan
	signalGroup func(syscall.Signal)
	exited      <-chan error // the command's Wait
	sigs        <-chan os.Signal
	logf        func(string, ...any)
}

// run waits for the command to finish, forwards signals to it, sends SIGTERM
// when renewals fail and only grace is left before the lease deadline, and
// SIGKILL once the lease is over. It checks Err every 20ms itself (Err
// compares the deadline with the clock), so after a pause or a host suspend
// it kills at once, before any lease timer has run.
func (w *watch) run(ctx context.Context) error {
	lease, name, prog := w.lease, w.name, w.prog
	check := w.clk.NewTicker(20 * time.Millisecond)
	defer check.Stop()
	termSent := false
	for {
		select {
		case err := <-w.exited:
			if termSent {
				return &exitError{ExitLeaseLost, fmt.Errorf("stopped %s: lease on %q was being lost (%v)", prog, name, lease.Jeopardy())}
			}
			release := lease.Release
			if w.recordRun && err == nil {
				release = lease.ReleaseRan // the run succeeded: record it for --once-per
			}
			if lerr := lease.Err(); lerr != nil {
				w.logf("warning: the lease on %q ended while %s ran: %v", name, prog, lerr)
			} else if rerr := release(context.WithoutCancel(ctx)); rerr != nil {
				w.logf("release %q: %v", name, rerr)
			}
			return childExit(err)
		case sig := <-w.sigs:
			w.signalGroup(sig.(syscall.Signal))
		case <-lease.Done():
			return killForLoss(lease, name, prog, w.signalGroup, w.exited, w.logf)
		case <-check.C():
			if lease.Err() != nil {
				return killForLoss(lease, name, prog, w.signalGroup, w.exited, w.logf)
			}
			if left := clock.Until(w.clk, lease.Deadline()); !termSent && lease.Jeopardy() != nil && left <= w.grace {
				w.logf("renewals failing (%v); sending SIGTERM to %s, SIGKILL at the lease deadline in %v",
					lease.Jeopardy(), prog, left.Round(time.Millisecond))
				w.signalGroup(syscall.SIGTERM)
				termSent = true
			}
		}
	}
}

// killForLoss kills the command's group at once: the lease is over.
func killForLoss(lease heldLease, name, prog string, signalGroup func(syscall.Signal), exited <-chan error, logf func(string, ...any)) error {
	select {
	case err := <-exited: // it had already finished
		if lease.Err() != nil {
			logf("warning: the lease on %q ended as %s finished: %v", name, prog, lease.Err())
		}
		return childExit(err)
	default:
	}
	signalGroup(syscall.SIGKILL)
	<-exited
	return &exitError{ExitLeaseLost, fmt.Errorf("killed %s: lost the lease on %q: %w", prog, name, lease.Err())}
}

// childExit turns the command's exit status into ours.
func childExit(err error) error {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return &exitError{code, fmt.Errorf("command exited with code %d", code)}
	}
	return err
}

// interrupts catches SIGINT, SIGTERM and SIGHUP while fence run waits for
// a lock or fence elect for an election, so that an interrupted waiter
// leaves the line at once — the client withdraws the wait (or gives back a
// grant), and closing it revokes the lease — instead of dying with its
// place in the queue and its lease kept for a TTL. stop it only once the
// command's own signal handling is in place (runHolding's, deferred by the
// caller), so a signal in between is caught, not fatal.
type interrupts struct {
	parent, ctx context.Context
	stop        context.CancelFunc
}

func catchInterrupts(parent context.Context) *interrupts {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	return &interrupts{parent: parent, ctx: ctx, stop: stop}
}

// outcome runs wait under the interruptible context. If a signal ended it,
// a win that came with the signal is undone by giveBack and the error is
// ExitInterrupted (130, as a shell reports SIGINT), saying what was
// interrupted.
func (in *interrupts) outcome(what string, wait, giveBack func(context.Context) error) error {
	err := wait(in.ctx)
	if in.ctx.Err() == nil || in.parent.Err() != nil {
		return err
	}
	if err == nil { // won as the signal came: give it back
		if err = giveBack(in.parent); err == nil {
			err = in.ctx.Err()
		}
	}
	return &exitError{ExitInterrupted, fmt.Errorf("interrupted while %s: %w", what, err)}
}
