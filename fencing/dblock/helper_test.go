package dblock_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/dblock"
	"github.com/fencehq/fence/internal/dbtest"
)

// The helper process: the test binary run again with FENCE_DBLOCK_HELPER
// set to a mode. It takes its locks, prints "locked <server pid>", holds
// them until its stdin closes, and prints "done <outcome>" (outcome: see
// kind) when its call returns.
func TestMain(m *testing.M) {
	if mode := os.Getenv("FENCE_DBLOCK_HELPER"); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// kind names err's class, for the helper's last line.
func kind(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{{dblock.ErrLockTimeout, "timeout"}, {dblock.ErrNotAvailable, "notavailable"}, {dblock.ErrDeadlock, "deadlock"},
		{dblock.ErrIdleTimeout, "idle"}, {dblock.ErrPooled, "pooled"}, {dblock.ErrBadInput, "badinput"}} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	if err == nil {
		return "ok"
	}
	return "error " + strings.ReplaceAll(err.Error(), "\n", " ")
}

func helper(mode string) int {
	ctx := context.Background()
	dialect := fencing.Postgres
	db := dbtest.Postgres()
	if os.Getenv("FENCE_DBLOCK_DIALECT") == "mysql" {
		dialect, db = fencing.MySQL, dbtest.MySQL()
	}
	h, err := sql.Open(db.Driver, db.DSN)
	if err != nil {
		fmt.Println("done", kind(err))
		return 1
	}
	defer h.Close()
	names := strings.Split(os.Getenv("FENCE_DBLOCK_NAMES"), ",")
	o := dblock.Options{Dialect: dialect}
	if t := os.Getenv("FENCE_DBLOCK_TIMEOUT"); t != "" {
		o.Timeout, _ = time.ParseDuration(t)
	}
	// hold reports the server session and waits for the parent to close stdin.
	hold := func(ctx context.Context, q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) error {
		pidQuery := "SELECT pg_backend_pid()"
		if dialect == fencing.MySQL {
			pidQuery = "SELECT CONNECTION_ID()"
		}
		var pid int64
		if err := q.QueryRowContext(ctx, pidQuery).Scan(&pid); err != nil {
			return err
		}
		fmt.Println("locked", pid)
		io.Copy(io.Discard, os.Stdin)
		return nil
	}
	switch mode {
	case "intx":
		err = dblock.InTx(ctx, h, o, names, func(tx *sql.Tx) error { return hold(ctx, tx) })
	case "session":
		err = dblock.InSession(ctx, h, o, names, func(conn *sql.Conn) error { return hold(ctx, conn) })
	case "row":
		err = inTx(ctx, h, func(tx *sql.Tx) error {
			found, err := dblock.LockRow(ctx, fencing.SQL(tx), o, os.Getenv("FENCE_DBLOCK_TABLE"), []string{"id"}, names[0])
			if err != nil {
				return err
			}
			if !found {
				return errors.New("no row")
			}
			return hold(ctx, tx)
		})
	case "raw":
		// The locks in the order given, without dblock: what the fixed
		// order prevents.
		err = inTx(ctx, h, func(tx *sql.Tx) error {
			for _, n := range names {
				if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", dblock.Key(n)); err != nil {
					return dblock.Classify(err, dblock.Block)
				}
			}
			return hold(ctx, tx)
		})
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	fmt.Println("done", kind(err))
	return 0
}

// inTx runs fn in a transaction: commit on nil, roll back otherwise.
func inTx(ctx context.Context, h *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := h.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// proc is a running helper process.
type proc struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// start runs a helper in mode on names; env adds FENCE_DBLOCK_* settings
// ("TIMEOUT=100ms", "DIALECT=mysql", "TABLE=t").
func start(t testing.TB, mode string, names []string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FENCE_DBLOCK_HELPER="+mode, "FENCE_DBLOCK_NAMES="+strings.Join(names, ","))
	for _, e := range env {
		cmd.Env = append(cmd.Env, "FENCE_DBLOCK_"+e)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(p.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
	}()
	t.Cleanup(func() { syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	return p
}

// line returns the helper's next line, "" if it exited first.
func (p *proc) line(ctx context.Context) string {
	p.t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-ctx.Done():
		p.t.Fatalf("helper said nothing: %v", ctx.Err())
		return ""
	}
}

// locked waits for "locked <pid>" and returns the pid.
func (p *proc) locked(ctx context.Context) int64 {
	p.t.Helper()
	l := p.line(ctx)
	var pid int64
	if _, err := fmt.Sscanf(l, "locked %d", &pid); err != nil {
		p.t.Fatalf("helper: %q, want locked <pid>", l)
	}
	return pid
}

// done releases the helper's locks (if it holds them) and returns its outcome.
func (p *proc) done(ctx context.Context) string {
	p.t.Helper()
	p.stdin.Close()
	for {
		l := p.line(ctx)
		if out, ok := strings.CutPrefix(l, "done "); ok {
			return out
		}
		if l == "" {
			return "exited"
		}
	}
}

// testCtx is the test's context with a safety deadline: a mutant that
// waits forever fails here instead of hanging the run. No test asserts a
// duration.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
