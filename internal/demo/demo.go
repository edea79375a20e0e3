// Package demo tells the story of background/001 with real processes: a
// holder paused past its lease wakes up and writes stale data. It runs the
// story twice — without fencing tokens (B's write is lost) and with them (A's
// write is refused) — against a real Postgres table or fence's built-in
// fenced key-value store.
package demo

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// Config says where the story runs.
type Config struct {
	// DSN of a Postgres database; empty means the built-in fenced key-value store.
	DSN string
	// Self is the fence binary, re-run as `fence demo-worker` for each worker.
	Self string
	// TTL of the workers' leases (short, so the story is quick).
	TTL time.Duration
}

const (
	restaurant = 77
	demoTable  = "fence_demo_totals"
)

// Run plays both runs and prints the timeline to out. It starts its own
// single-node server in a temporary directory.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	if cfg.DSN != "" && !slices.Contains(sql.Drivers(), "pgx") {
		return errors.New("this fence is a slim build (-tags fence_slim: the release archives, the container image) " +
			"without the Postgres driver a DSN needs: run the demo without one, or with a fence built by 'go build ./cmd/fence'")
	}
	dir, err := os.MkdirTemp("", "fence-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	scfg := server.DefaultConfig()
	scfg.DataDir, scfg.GRPCAddr, scfg.RaftAddr, scfg.MetricsAddr = filepath.Join(dir, "data"), "127.0.0.1:0", "127.0.0.1:0", ""
	scfg.MinTTL, scfg.DefaultLockDelay, scfg.TickInterval = 200*time.Millisecond, 0, 20*time.Millisecond
	scfg.HeartbeatTimeout, scfg.ElectionTimeout = 10*time.Millisecond, 50*time.Millisecond
	scfg.Logger, scfg.RaftLogLevel = slog.New(slog.NewTextHandler(io.Discard, nil)), "off"
	srv, err := server.New(scfg)
	if err != nil {
		return fmt.Errorf("start the demo's server: %w", err)
	}
	defer srv.Close()
	if err := srv.WaitReady(ctx); err != nil {
		return err
	}

	where := "fence's built-in fenced key-value store"
	if cfg.DSN != "" {
		where = "Postgres table " + demoTable
		if err := preparePostgres(ctx, cfg.DSN); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "fence demo: why a lease alone cannot protect data\n")
	fmt.Fprintf(out, "Two workers update restaurant %d's total in %s.\n", restaurant, where)
	fmt.Fprintf(out, "Worker A holds the lock, checks its lease, and is paused (SIGSTOP) right\n")
	fmt.Fprintf(out, "before it writes, for longer than its %v lease. Worker B takes over.\n", cfg.TTL)
	for i, fenced := range []bool{false, true} {
		title := "Run 1: without fencing tokens (the storage cannot tell holders apart)"
		if fenced {
			title = "Run 2: with fencing tokens (UPDATE … WHERE fence <= $token)"
		}
		fmt.Fprintf(out, "\n%s\n", title)
		r := &run{cfg: cfg, out: out, server: srv.GRPCAddr(), tls: pki.ClientFiles(server.DevTLSDir(scfg.DataDir)), fenced: fenced, lock: fmt.Sprintf("demo/run-%d/totals-%d", i+1, restaurant), start: time.Now()}
		if err := r.play(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nThe lock service behaved the same in both runs; only the storage changed.\n")
	return nil
}

type run struct {
	cfg    Config
	tls    pki.Files // the dev server's client certificate
	out    io.Writer
	server string
	fenced bool
	lock   string
	start  time.Time
}

func (r *run) say(who, format string, args ...any) {
	fmt.Fprintf(r.out, "  %+8.3fs  %-2s %s\n", time.Since(r.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// worker is a `fence demo-worker` process and its line protocol: it prints
// "acquired T", "ready", then waits for "go" on stdin and prints
// "wrote AMOUNT" or "refused OFFERED HIGHEST".
type worker struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
}

func (r *run) startWorker(ctx context.Context, name string, amount int) (*worker, error) {
	args := []string{"demo-worker", "--server", r.server, "--lock", r.lock, "--name", name,
		"--amount", strconv.Itoa(amount), "--ttl", r.cfg.TTL.String(), "--fenced=" + strconv.FormatBool(r.fenced)}
	if r.cfg.DSN != "" {
		args = append(args, "--dsn", r.cfg.DSN)
	}
	cmd := exec.CommandContext(ctx, r.cfg.Self, args...)
	cmd.Stderr = os.Stderr
	// The worker's client finds the dev server's certificate here.
	cmd.Env = append(os.Environ(), client.EnvCA+"="+r.tls.CA, client.EnvCert+"="+r.tls.Cert, client.EnvKey+"="+r.tls.Key)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	return &worker{name: name, cmd: cmd, in: in, lines: bufio.NewScanner(out)}, nil
}

func (w *worker) expect(prefix string) ([]string, error) {
	if !w.lines.Scan() {
		return nil, fmt.Errorf("worker %s ended early (wanted %q): %v", w.name, prefix, w.lines.Err())
	}
	f := strings.Fields(w.lines.Text())
	if len(f) == 0 || f[0] != prefix && !(prefix == "wrote" && f[0] == "refused") {
		return nil, fmt.Errorf("worker %s said %q, wanted %q", w.name, w.lines.Text(), prefix)
	}
	return f, nil
}

func (w *worker) kill() {
	if w.cmd.Process != nil {
		syscall.Kill(w.cmd.Process.Pid, syscall.SIGKILL)
		w.cmd.Wait()
	}
}

func (r *run) play(ctx context.Context) error {
	if err := resetStore(ctx, r); err != nil {
		return err
	}
	a, err := r.startWorker(ctx, "A", 42000)
	if err != nil {
		return err
	}
	defer a.kill()
	f, err := a.expect("acquired")
	if err != nil {
		return err
	}
	r.say("A", "acquired the lock with token %s (lease TTL %v)", f[1], r.cfg.TTL)
	if _, err := a.expect("ready"); err != nil {
		return err
	}
	r.say("A", "read the orders, computed total = 42000, checked: lease still valid")
	syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP)
	r.say("A", "PAUSED by SIGSTOP, just before its write (think: GC pause, VM migration)")

	b, err := r.startWorker(ctx, "B", 43500)
	if err != nil {
		return err
	}
	defer b.kill()
	if f, err = b.expect("acquired"); err != nil {
		return err
	}
	r.say("B", "acquired the lock with token %s: A's lease expired while A was paused", f[1])
	if _, err := b.expect("ready"); err != nil {
		return err
	}
	fmt.Fprintln(b.in, "go")
	if _, err = b.expect("wrote"); err != nil {
		return err
	}
	r.say("B", "read the orders again (one more came in), wrote total = 43500")
	b.cmd.Wait()

	syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
	r.say("A", "resumed (SIGCONT); from its point of view no time has passed")
	fmt.Fprintln(a.in, "go")
	if f, err = a.expect("wrote"); err != nil {
		return err
	}
	if f[0] == "refused" {
		r.say("A", "write REFUSED: token %s < %s, a newer holder has written. A stops.", f[1], f[2])
	} else {
		r.say("A", "wrote total = 42000 (its stale result)")
	}
	a.cmd.Wait()

	amount, who, err := readStore(ctx, r)
	if err != nil {
		return err
	}
	verdict := "correct: the newest holder's data survived."
	if who != "B" {
		verdict = "WRONG: B's update was silently overwritten by the paused holder."
	}
	fmt.Fprintf(r.out, "  result: total = %d, written by %s. %s\n", amount, who, verdict)
	return nil
}

// The storage: a Postgres table, or a key of the built-in fenced store.

func kvKey(r *run) string { return r.lock + "/value" }

func preparePostgres(ctx context.Context, dsn string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+demoTable+" (restaurant_id BIGINT PRIMARY KEY, amount BIGINT NOT NULL, written_by TEXT NOT NULL)"); err != nil {
		return fmt.Errorf("demo table: %w (is the DSN right? e.g. postgres://postgres@127.0.0.1:5432/test)", err)
	}
	return demoTableFor().EnsureColumn(ctx, db)
}

func demoTableFor() *fencing.Table {
	t, _ := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: demoTable, Key: []string{"restaurant_id"}})
	return t
}

func resetStore(ctx context.Context, r *run) error {
	if r.cfg.DSN == "" {
		return nil // each run uses its own key
	}
	db, err := sql.Open("pgx", r.cfg.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "DELETE FROM "+demoTable+" WHERE restaurant_id = $1", restaurant)
	if err == nil {
		_, err = db.ExecContext(ctx, "INSERT INTO "+demoTable+" (restaurant_id, amount, written_by, fence) VALUES ($1, 0, 'nobody', 0)", restaurant)
	}
	return err
}

func readStore(ctx context.Context, r *run) (int64, string, error) {
	if r.cfg.DSN != "" {
		db, err := sql.Open("pgx", r.cfg.DSN)
		if err != nil {
			return 0, "", err
		}
		defer db.Close()
		var amount int64
		var who string
		err = db.QueryRowContext(ctx, "SELECT amount, written_by FROM "+demoTable+" WHERE restaurant_id = $1", restaurant).Scan(&amount, &who)
		return amount, who, err
	}
	c, err := client.Dial(ctx, []string{r.server}, client.WithTLSFiles(r.tls.CA, r.tls.Cert, r.tls.Key))
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	v, _, err := c.Get(ctx, kvKey(r))
	if err != nil {
		return 0, "", err
	}
	amount, who, _ := strings.Cut(string(v), " by ")
	n, _ := strconv.ParseInt(amount, 10, 64)
	return n, who, nil
}

// WorkerConfig is one worker's part.
type WorkerConfig struct {
	Server, Lock, Name, DSN string
	Amount                  int64
	TTL                     time.Duration
	Fenced                  bool
}

// Worker runs in a child process: lock, report, wait for "go" on in (the
// orchestrator pauses it meanwhile), write, report.
func Worker(ctx context.Context, cfg WorkerConfig, in io.Reader, out io.Writer) error {
	c, err := client.Dial(ctx, []string{cfg.Server}, client.WithTTL(cfg.TTL), client.WithLockDelay(0), client.WithOwner("worker-"+cfg.Name))
	if err != nil {
		return err
	}
	defer c.Close()
	lease, err := c.Lock(ctx, cfg.Lock)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "acquired", lease.Token())
	if err := lease.Err(); err != nil { // the check that cannot help: the pause comes after it
		return err
	}
	fmt.Fprintln(out, "ready")
	if !bufio.NewScanner(in).Scan() {
		return errors.New("no go-ahead from the demo")
	}
	// The write. Unfenced, the worker does not pass its token: the storage
	// sees every holder alike (token 1 for the built-in store, a plain UPDATE
	// for Postgres).
	err = write(ctx, c, cfg, lease.Token())
	var stale *fencing.StaleError
	switch {
	case errors.As(err, &stale):
		fmt.Fprintln(out, "refused", stale.Offered, stale.Highest)
		return nil
	case err != nil:
		return err
	}
	fmt.Fprintln(out, "wrote", cfg.Amount)
	return nil
}

func write(ctx context.Context, c *client.Client, cfg WorkerConfig, token uint64) error {
	value := fmt.Sprintf("%d by %s", cfg.Amount, cfg.Name)
	if cfg.DSN == "" {
		if !cfg.Fenced {
			token = 1
		}
		return c.Put(ctx, cfg.Lock+"/value", []byte(value), token)
	}
	db, err := sql.Open("pgx", cfg.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	if !cfg.Fenced {
		_, err := db.ExecContext(ctx, "UPDATE "+demoTable+" SET amount = $1, written_by = $2 WHERE restaurant_id = $3", cfg.Amount, cfg.Name, restaurant)
		return err
	}
	return demoTableFor().Update(ctx, db, token, restaurant, map[string]any{"amount": cfg.Amount, "written_by": cfg.Name})
}
