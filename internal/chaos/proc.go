package chaos

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a process the harness started. Only these are ever signalled,
// always by their own pid.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed once it exited and was reaped

	mu     sync.Mutex
	paused bool // guarded by mu
}

// shifted prefixes argv so the process runs in a new time namespace whose
// CLOCK_MONOTONIC and CLOCK_BOOTTIME are offset by shift (unshare execs in
// place: the pid stays the process's own).
func shifted(shift time.Duration, argv []string) []string {
	if shift == 0 {
		return argv
	}
	s := strconv.Itoa(int(shift / time.Second))
	return append([]string{"unshare", "--time", "--monotonic", s, "--boottime", s}, argv...)
}

func startProc(name string, argv, env []string, logPath string) (*proc, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if p.alive() {
		_ = syscall.Kill(p.cmd.Process.Pid, sig)
	}
}

// pause stops the process (SIGSTOP); resume continues it.
func (p *proc) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signal(syscall.SIGSTOP)
	p.paused = true
}

func (p *proc) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signal(syscall.SIGCONT)
	p.paused = false
}

func (p *proc) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to end (SIGTERM after a SIGCONT) and kills it if it
// has not within grace.
func (p *proc) stop(grace time.Duration) {
	p.resume()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// httpOK reports whether GET path on addr (HTTPS, with cfg) answers 200.
func httpOK(addr, path string, cfg *tls.Config) bool {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 300 * time.Millisecond}, "tcp", addr, cfg)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\n\r\n", path)
	buf := make([]byte, 64)
	k, _ := c.Read(buf)
	return strings.Contains(string(buf[:k]), " 200 ")
}
