// Package peers runs the systems fence is compared with — a 3-member etcd
// cluster and Redis — and fence itself, as real processes on 127.0.0.1,
// and adapts each to internal/bench's Target so all run the same loops.
package peers

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Proc is a process started by the bench; only these are signalled, by pid.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProc starts argv with its output in logPath.
func StartProc(name string, argv []string, logPath string) (*Proc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	return p, nil
}

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
