// Package peers runs the systems fence is compared with — a 3-member etcd
// cluster, Redis and a 3-server ZooKeeper ensemble — and fence itself, as
// real processes on 127.0.0.1,
// and adapts each to internal/bench's Target so all run the same loops.
package peers

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is a process started by the bench; only these are signalled, by pid.
type Proc struct {
	name, logPath string
	argv          []string
	cmd           *exec.Cmd
	done          chan struct{}
}

// StartProc starts argv with its output in logPath.
func StartProc(name string, argv []string, logPath string) (*Proc, error) {
	p := &Proc{name: name, argv: argv, logPath: logPath}
	return p, p.start(os.O_CREATE | os.O_WRONLY | os.O_TRUNC)
}

func (p *Proc) start(flags int) error {
	log, err := os.OpenFile(p.logPath, flags, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Restart starts the (ended) process again with the same arguments,
// appending to its log.
func (p *Proc) Restart() error { return p.start(os.O_CREATE | os.O_WRONLY | os.O_APPEND) }

// Stop sends SIGTERM, then SIGKILL after 10s, and waits.
func (p *Proc) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// RSS is the process's resident memory in bytes (VmRSS).
func (p *Proc) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib); err != nil {
				return 0, fmt.Errorf("parse VmRSS %q: %w", rest, err)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", p.Pid())
}
