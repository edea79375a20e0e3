package conformance

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// adapterCmd says how to start one library's adapter.
type adapterCmd struct {
	name string
	argv func(t testing.TB) []string
	env  []string
}

// running is an adapter process the harness talks to (ADAPTER.md).
type running struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	nextID int64

	mu      sync.Mutex
	replies map[int64]chan reply
	events  chan reply
	exited  chan struct{}
}

// reply is a reply or an event line, decoded.
type reply struct {
	ID           int64  `json:"id"`
	OK           bool   `json:"ok"`
	Error        string `json:"error"`
	Kind         string `json:"kind"`
	Token        uint64 `json:"token"`
	LeaseNumber  uint64 `json:"lease_number"`
	Held         bool   `json:"held"`
	DeadlineLeft int64  `json:"deadline_left_ms"`
	Jeopardy     bool   `json:"jeopardy"`
	Event        string `json:"event"`
	Name         string `json:"name"`
}

// start runs the adapter against servers (addresses of the relay).
func (a adapterCmd) start(t testing.TB, servers []string) *running {
	t.Helper()
	argv := a.argv(t)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "FENCE_SERVERS="+strings.Join(servers, ","), "FENCE_INSECURE=1"), a.env...)
	stderr, err := os.Create(filepath.Join(t.TempDir(), a.name+"-adapter.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &running{t: t, cmd: cmd, stdin: stdin, replies: map[int64]chan reply{}, events: make(chan reply, 64), exited: make(chan struct{})}
	go func() {
		defer close(r.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var rp reply
			if err := json.Unmarshal(sc.Bytes(), &rp); err != nil {
				t.Errorf("%s adapter wrote a line that is no JSON: %q", a.name, sc.Text())
				continue
			}
			if rp.Event != "" {
				select {
				case r.events <- rp:
				default:
				}
				continue
			}
			r.mu.Lock()
			ch := r.replies[rp.ID]
			delete(r.replies, rp.ID)
			r.mu.Unlock()
			if ch == nil {
				t.Errorf("%s adapter answered command %d, which it was not sent or answered already", a.name, rp.ID)
				continue
			}
			ch <- rp
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		stdin.Close()
		select {
		case <-r.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
		stderr.Close()
		if t.Failed() {
			if b, err := os.ReadFile(stderr.Name()); err == nil && len(b) > 0 {
				t.Logf("%s adapter's stderr:\n%s", a.name, b)
			}
		}
	})
	return r
}

// send sends a command and returns a channel for its reply.
func (r *running) send(cmd map[string]any) <-chan reply {
	r.t.Helper()
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	ch := make(chan reply, 1)
	r.replies[id] = ch
	r.mu.Unlock()
	cmd["id"] = id
	b, err := json.Marshal(cmd)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.stdin.Write(append(b, '\n')); err != nil {
		r.t.Fatalf("adapter stdin: %v", err)
	}
	return ch
}

// wait waits up to d for a reply.
func (r *running) wait(ch <-chan reply, d time.Duration, what string) reply {
	r.t.Helper()
	select {
	case rp := <-ch:
		return rp
	case <-r.exited:
		r.t.Fatalf("%s: the adapter exited", what)
	case <-time.After(d):
		r.t.Fatalf("%s: no reply within %v", what, d)
	}
	return reply{}
}

// do sends a command and waits (up to 30 s) for its reply.
func (r *running) do(cmd map[string]any) reply {
	r.t.Helper()
	return r.wait(r.send(cmd), 30*time.Second, cmd["op"].(string))
}

// lock takes name with a lease of ttl, waiting up to 20 s; it fails the
// test unless granted.
func (r *running) lock(name string, ttl time.Duration) reply {
	r.t.Helper()
	rp := r.do(map[string]any{"op": "lock", "name": name, "ttl_ms": ttl.Milliseconds(), "wait": true, "timeout_ms": 20000})
	if !rp.OK || rp.Token == 0 || rp.LeaseNumber == 0 {
		r.t.Fatalf("lock %s: %+v", name, rp)
	}
	return rp
}

func (r *running) status(name string) reply {
	r.t.Helper()
	rp := r.do(map[string]any{"op": "status", "name": name})
	if !rp.OK {
		r.t.Fatalf("status %s: %+v", name, rp)
	}
	return rp
}

func (r *running) release(name string) {
	r.t.Helper()
	if rp := r.do(map[string]any{"op": "release", "name": name}); !rp.OK {
		r.t.Fatalf("release %s: %+v", name, rp)
	}
}

// signal sends sig (SIGSTOP, SIGCONT) to the adapter process.
func (r *running) signal(sig syscall.Signal) {
	if err := syscall.Kill(r.cmd.Process.Pid, sig); err != nil {
		r.t.Fatal(err)
	}
}

// event waits up to d for the next event.
func (r *running) event(d time.Duration) (reply, bool) {
	select {
	case e := <-r.events:
		return e, true
	case <-time.After(d):
		return reply{}, false
	}
}
