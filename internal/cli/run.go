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
		ttl, wait, grace, lockDelay time.Duration
		owner                       string
	)
	cmd := &cobra.Command{
		Use:   "run NAME [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock; stop it if the lock is lost",
		Long: `Run CMD while holding the lock NAME, renewing the lease every TTL/3.

CMD gets FENCE_LOCK (the name), FENCE_TOKEN (the fencing token: pass it to
every write, so storage can refuse a stale holder), FENCE_SIGNED_TOKEN (the
server's signed statement of the grant, for storage that verifies it with
fencing.Verifier; set if the server has a token key) and FENCE_TTL (the
lease's TTL, as --ttl; fence renews it, so CMD need not watch the time).

If the lock is held, fence waits up to --wait (default 10m, as 'fence lock'),
then exits 75; --wait 0 fails at once.

If renewals keep failing, fence stops CMD before the lease can expire: it sends
SIGTERM when only --grace is left before the local deadline, and SIGKILL at
the deadline (which is a safety margin, TTL/10, before the server could grant
the lock to anyone else). After a pause of fence itself, or a suspend of the
host (the deadline counts on CLOCK_BOOTTIME, which keeps counting while the
host sleeps), it kills CMD at once.
CMD runs in its own process group; both signals go to the whole group.

Exit codes: CMD's own when it finishes; 75 if the lock could not be acquired
(held and --wait ran out); 76 if the lease was lost and CMD was stopped;
69 if no server could be reached; 2 for bad usage; 1 for other errors.`,
		Example: `  # run the nightly job once across the fleet; wait up to 10m for the lock
  fence run jobs/nightly --ttl 30s --wait 10m -- ./nightly.sh

  # give up at once if another host has it
  fence run jobs/nightly --wait 0 -- ./nightly.sh

  # the job sees its token
  fence run totals/77 -- sh -c 'psql -c "UPDATE totals SET amount=42, fence=$FENCE_TOKEN WHERE id=77 AND fence<=$FENCE_TOKEN"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return &exitError{ExitUsage, errors.New("usage: fence run NAME [flags] -- CMD [ARGS...] (put -- before the command)")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("grace") {
				grace = min(grace, ttl/3)
			}
			if grace <= 0 || grace >= ttl-ttl/10 {
				return usageError(cmd, fmt.Errorf("--grace %v must be positive and shorter than the TTL minus its 10%% safety margin (%v)", grace, ttl-ttl/10))
			}
			opts := []client.Option{client.WithTTL(ttl)}
			if owner != "" {
				opts = append(opts, client.WithOwner(owner))
			}
			if cmd.Flags().Changed("lock-delay") {
				opts = append(opts, client.WithLockDelay(lockDelay))
			}
			return runLocked(cmd, g, args[0], args[1:], ttl, wait, grace, opts)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&ttl, "ttl", 30*time.Second, "lease TTL; renewed every TTL/3")
	f.DurationVar(&wait, "wait", defaultWait, "how long to wait for the lock (0: fail at once if held)")
	f.DurationVar(&grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when the lease is being lost (at most TTL/3 unless set)")
	f.DurationVar(&lockDelay, "lock-delay", 0, "if this lease expires, keep the lock from others this long (default: the server's)")
	f.StringVar(&owner, "owner", "", "label others see for this holder (default host/pid)")
	positive(f, "ttl")
	return cmd
}

// defaultWait is how long lock and run wait for a held lock by default.
const defaultWait = 10 * time.Minute

func runLocked(cmd *cobra.Command, g *globals, name string, argv []string, ttl, wait, grace time.Duration, opts []client.Option) error {
	ctx := cmd.Context()
	c, err := g.dial(ctx, opts...)
	if err != nil {
		return err
	}
	defer c.Close()

	var lease *client.Lease
	if wait == 0 {
		lease, err = c.TryLock(ctx, name, opts...)
	} else {
		lctx, cancel := context.WithTimeout(ctx, wait)
		lease, err = c.Lock(lctx, name, opts...)
		cancel()
	}
	if err != nil {
		return notAcquired(name, wait, err)
	}
	logf := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "fence: "+format+"\n", args...) }
	logf("acquired %q with token %d; running %s", name, lease.Token(), argv[0])

	child := exec.Command(argv[0], argv[1:]...)
	child.Env = append(os.Environ(), "FENCE_LOCK="+name, "FENCE_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"FENCE_TTL="+ttl.String())
	if signed := lease.SignedToken(); signed != "" {
		child.Env = append(child.Env, "FENCE_SIGNED_TOKEN="+signed)
	}
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

	w := &watch{clk: clock.Real{}, lease: lease, name: name, prog: argv[0], grace: grace,
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
}

// watch supervises the command while the lease holds.
type watch struct {
	clk         clock.Clock // the clock the client times the lease on (Real: CLOCK_BOOTTIME)
	lease       heldLease
	name, prog  string
	grace       time.Duration
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
			if lerr := lease.Err(); lerr != nil {
				w.logf("warning: the lease on %q ended while %s ran: %v", name, prog, lerr)
			} else if rerr := lease.Release(context.WithoutCancel(ctx)); rerr != nil {
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
