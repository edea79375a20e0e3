// Package conformance checks fence client libraries against real fence
// servers (three `fence serve` processes) with faults between them: a relay
// (internal/relay) that loses replies, ends renewal streams and slips a
// malformed request into a stream, and a harness that pauses the client's
// process, transfers and kills the leader. Each library is driven through
// an adapter (ADAPTER.md): the Go client's (goadapter) always, the Python
// client's (clients/python) when python3 has grpcio and protobuf
// (FENCE_REQUIRE_PYTHON=1 fails instead of skipping).
//
// Every scenario states what docs/protocol.md requires of a client; a
// client that breaks the contract fails it.
package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/proctest"
	"github.com/fencehq/fence/internal/relay"
)

// repoRoot is the repository's root (this file is in test/conformance).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// adapters are the libraries under test.
func adapters(t *testing.T) []adapterCmd {
	list := []adapterCmd{{name: "go", argv: func(t testing.TB) []string {
		return []string{proctest.Binary(t, "github.com/fencehq/fence/test/conformance/goadapter")}
	}}}
	py := filepath.Join(repoRoot(), "clients", "python")
	script := filepath.Join(py, "conformance_adapter.py")
	_, statErr := os.Stat(script)
	interp := python()
	probe := exec.Command(interp, "-c", "import grpc, google.protobuf")
	switch probeErr := probe.Run(); {
	case statErr == nil && probeErr == nil:
		list = append(list, adapterCmd{name: "python", argv: func(testing.TB) []string { return []string{interp, script} },
			env: []string{"PYTHONPATH=" + py, "PYTHONUNBUFFERED=1"}})
	case os.Getenv("FENCE_REQUIRE_PYTHON") == "1":
		t.Fatalf("FENCE_REQUIRE_PYTHON=1, but the Python client cannot run: adapter %v, %s with grpc and protobuf: %v (clients/python/run-tests.sh installs them)", statErr, interp, probeErr)
	default:
		t.Logf("skipping the Python client: adapter %v; %s with grpc and protobuf: %v", statErr, interp, probeErr)
	}
	return list
}

// python is the interpreter of the Python client: $PYTHON, else Debian's
// /usr/bin/python3 (where python3-grpcio installs; a pyenv python3 may come
// first in PATH), else python3.
func python() string {
	if p := os.Getenv("PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// faults is what the relay does to the calls that cross it.
type faults struct {
	mu         sync.Mutex
	lose       map[string]int // method → replies still to lose
	calls      map[string]int // method → calls seen
	endStreams int            // renewal streams to end (status OK) after their first answer
	inject     int            // renewal streams to slip a malformed request into
	injected   map[*relay.Call]bool
	renewing   map[*relay.Call]bool // Session streams that carried a renewal
	// delayRenewals holds back each renewal's answer this long.
	delayRenewals time.Duration
	delays        int // answers held back so far
}

// malformedSeq is the seq of the request the relay slips into a stream: no
// client's (they count from 1).
const malformedSeq = 1 << 62

func newFaults() *faults {
	return &faults{lose: map[string]int{}, calls: map[string]int{}, injected: map[*relay.Call]bool{}, renewing: map[*relay.Call]bool{}}
}

func (f *faults) hooks() relay.Hooks {
	return relay.Hooks{Up: f.up, Down: f.down, Done: f.done}
}

// up slips a renewal with a 3-byte lease secret in after the first
// renewal of a stream chosen by inject. On a Session stream (which carries
// a client's Acquire, Release and renewals) it counts each call as the
// unary call it stands for, and the stream as a renewal stream once a
// renewal crossed it.
func (f *faults) up(c *relay.Call, msg []byte) [][]byte {
	method := f.methodUp(c, msg)
	if method != api.FenceService_KeepAlive_FullMethodName {
		return [][]byte{msg}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inject == 0 || f.injected[c] {
		return [][]byte{msg}
	}
	f.inject--
	f.injected[c] = true
	bad := &api.KeepAliveRequest{LeaseSecret: []byte{1, 2, 3}, Seq: malformedSeq}
	var out proto.Message = bad
	if c.Method == api.FenceService_Session_FullMethodName { // under a call id the client never gave
		out = &api.SessionRequest{CallId: malformedSeq, Call: &api.SessionRequest_KeepAlive{KeepAlive: bad}}
	}
	b, err := proto.Marshal(out)
	if err != nil {
		panic(err)
	}
	return [][]byte{msg, b}
}

// methodUp is the call msg (a request of c) stands for: c's method, or on
// a Session stream the unary method of the call it carries, counted here.
func (f *faults) methodUp(c *relay.Call, msg []byte) string {
	if c.Method != api.FenceService_Session_FullMethodName {
		return c.Method
	}
	var r api.SessionRequest
	if proto.Unmarshal(msg, &r) != nil {
		return ""
	}
	method := ""
	switch r.Call.(type) {
	case *api.SessionRequest_Acquire:
		method = api.FenceService_Acquire_FullMethodName
	case *api.SessionRequest_Release:
		method = api.FenceService_Release_FullMethodName
	case *api.SessionRequest_KeepAlive:
		method = api.FenceService_KeepAlive_FullMethodName
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if method == api.FenceService_KeepAlive_FullMethodName {
		f.renewing[c] = true // counted as a renewal stream when it ends
	} else if method != "" {
		f.calls[method]++
	}
	return method
}

// methodDown is the call msg (an answer of c) answers: c's method, or on a
// Session stream the unary method of the call it answers ("" for a refusal).
func methodDown(c *relay.Call, msg []byte) string {
	if c.Method != api.FenceService_Session_FullMethodName {
		return c.Method
	}
	var r api.SessionResponse
	if proto.Unmarshal(msg, &r) != nil {
		return ""
	}
	switch r.Result.(type) {
	case *api.SessionResponse_Acquire:
		return api.FenceService_Acquire_FullMethodName
	case *api.SessionResponse_Release:
		return api.FenceService_Release_FullMethodName
	case *api.SessionResponse_KeepAlive:
		return api.FenceService_KeepAlive_FullMethodName
	}
	return ""
}

// down loses a reply (the member acted; the caller hears UNAVAILABLE: on a
// Session stream the stream ends so, with every call on it), or ends a
// renewal stream after its first answer.
func (f *faults) down(c *relay.Call, msg []byte) ([][]byte, bool, error) {
	method := methodDown(c, msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.delayRenewals; d > 0 && method == api.FenceService_KeepAlive_FullMethodName {
		f.delays++
		f.mu.Unlock()
		time.Sleep(d) // this stream's answers only
		f.mu.Lock()
	}
	if f.lose[method] > 0 {
		f.lose[method]--
		return nil, true, status.Error(codes.Unavailable, "conformance relay: the reply was lost on its way")
	}
	if method == api.FenceService_KeepAlive_FullMethodName && f.endStreams > 0 && !f.injected[c] {
		f.endStreams--
		return [][]byte{msg}, true, nil
	}
	return [][]byte{msg}, false, nil
}

func (f *faults) done(c *relay.Call, _, _ []byte, err error) error {
	f.mu.Lock()
	switch {
	case c.Method != api.FenceService_Session_FullMethodName:
		f.calls[c.Method]++
	case f.renewing[c]:
		f.calls[api.FenceService_KeepAlive_FullMethodName]++
	}
	delete(f.injected, c)
	delete(f.renewing, c)
	f.mu.Unlock()
	return err
}

// with runs fn on f under its lock: a scenario arms a fault.
func (f *faults) with(fn func(*faults)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *faults) loseNext(method string) { f.with(func(f *faults) { f.lose[method]++ }) }

func (f *faults) delayed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delays
}

func (f *faults) seen(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// env is one scenario's world: the cluster, a relay with faults in front of
// it, and the adapter under test dialling the relay.
type env struct {
	t  *testing.T
	c  *cluster
	f  *faults
	ad *running
}

func newEnv(t *testing.T, c *cluster, a adapterCmd) *env {
	f := newFaults()
	r, err := relay.New(c.addrs(), insecure.NewCredentials(), insecure.NewCredentials(), f.hooks())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	t.Cleanup(func() {
		if t.Failed() {
			c.logTails(t)
		}
	})
	return &env{t: t, c: c.on(t), f: f, ad: a.start(t, r.Addrs())}
}

// TestConformance runs every scenario against every adapter.
func TestConformance(t *testing.T) {
	for _, a := range adapters(t) {
		t.Run(a.name, func(t *testing.T) {
			c := newCluster(t, 3)
			for _, s := range scenarios {
				t.Run(s.name, func(t *testing.T) { s.run(newEnv(t, c, a)) })
			}
		})
	}
}
