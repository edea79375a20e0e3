package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/relay"
)

// FaultReplay re-sends captured mutating requests, byte-identical (same
// request id, same seq and ack), at random later moments: a network or a
// load balancer that duplicates and delays. Replays are not client
// operations and are not recorded in the histories; a server that acted on
// one shows up in the checks of what the servers did (audit trails,
// validity windows, the lock and register models) and, for an Acquire that
// a replay answered with a new grant, in "a late duplicate is never acted on".
const FaultReplay = "replay"

// Replay answers, as the summary counts them.
const (
	ReplayFromMemory = "ok-same-answer" // OK with the first answer the worker got (from the server's memory)
	ReplayOKUnseen   = "ok-unseen"      // OK, but no earlier OK answer of this request passed the proxy (+ method)
	ReplayAnswered   = "already-answered"
	ReplayActedAgain = "acted-again" // OK with a different answer: a violation
)

// ReplayCounts says how many requests were replayed and how the servers
// answered them.
type ReplayCounts struct {
	Sent     int            `json:"sent"`
	ByMethod map[string]int `json:"by_method"`
	// Answers by kind: the constants above, or "other <method> <code>".
	Answers map[string]int `json:"answers"`
}

// answeredMarker is in the message of the FAILED_PRECONDITION a call below
// the ack floor gets. The API gives that refusal no detail of its own, so
// the message is all there is to tell it from other FAILED_PRECONDITIONs.
const answeredMarker = "already answered"

// replayer receives the proxy's captures and re-sends some of them later,
// over connections of its own.
type replayer struct {
	conns []*grpc.ClientConn
	rng   *rand.Rand // used only by run's goroutine
	ttl   time.Duration
	in    chan capture
	note  func(format string, args ...any)

	wg sync.WaitGroup

	mu      sync.Mutex
	counts  ReplayCounts      // guarded by mu
	firstOK map[string][]byte // guarded by mu; request id → the OK answer the worker got
	acted   []Violation       // guarded by mu
	unseen  []unseenReplay    // guarded by mu
	puts    []*Op             // guarded by mu; replays of Puts to an election's key, as proclaims
}

// unseenReplay is a replay answered OK before any OK answer of its request
// had passed the proxy: the worker's own retry may still get one (a wait
// the replay found granted in the server's memory first). result compares
// them at the end.
type unseenReplay struct {
	c        capture
	id, resp string
}

func newReplayer(members []string, creds credentials.TransportCredentials, seed uint64, ttl time.Duration, note func(string, ...any)) (*replayer, error) {
	r := &replayer{rng: rand.New(rand.NewPCG(seed, 3)), ttl: ttl, in: make(chan capture, 4096), note: note,
		counts:  ReplayCounts{ByMethod: map[string]int{}, Answers: map[string]int{}},
		firstOK: map[string][]byte{}}
	var err error
	if r.conns, err = relay.Dial(members, creds); err != nil {
		return nil, err
	}
	return r, nil
}

// withRequestID is every mutating request.
type withRequestID interface {
	proto.Message
	GetRequestId() []byte
}

// newRequest makes an empty request of each mutating method.
var newRequest = map[string]func() withRequestID{
	methodCreateLease: func() withRequestID { return &api.CreateLeaseRequest{} },
	methodAcquire:     func() withRequestID { return &api.AcquireRequest{} },
	methodRelease:     func() withRequestID { return &api.ReleaseRequest{} },
	methodRevoke:      func() withRequestID { return &api.RevokeRequest{} },
	methodPut:         func() withRequestID { return &api.PutRequest{} },
	methodForce:       func() withRequestID { return &api.ForceReleaseRequest{} },
}

// requestID reads the request id of a mutating request.
func requestID(method string, req []byte) string {
	mk, ok := newRequest[method]
	if !ok {
		return ""
	}
	m := mk()
	if proto.Unmarshal(req, m) != nil {
		return ""
	}
	return string(m.GetRequestId())
}

// run schedules replays until ctx ends (enabled false: it only drains the
// captures). Each chosen capture is re-sent once, 10 ms to 5 TTLs after
// its answer passed: soon (while the call may still be unacknowledged and
// answered from memory), within a TTL, or several TTLs later (after the
// client has acknowledged it, and often after the lease has ended).
func (r *replayer) run(ctx context.Context, enabled bool) {
	for {
		var c capture
		select {
		case <-ctx.Done():
			return
		case c = <-r.in:
		}
		id := r.remember(c)
		if !enabled {
			continue
		}
		odds := 4
		if c.method == methodAcquire || c.method == methodRelease {
			odds = 2
		}
		if r.rng.IntN(odds) != 0 {
			continue
		}
		var d time.Duration
		switch r.rng.IntN(3) {
		case 0:
			d = between(r.rng, 10*time.Millisecond, 100*time.Millisecond)
		case 1:
			d = between(r.rng, 100*time.Millisecond, r.ttl)
		default:
			d = between(r.rng, r.ttl, 5*r.ttl)
		}
		wait := time.Duration(c.at + int64(d) - Mono())
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if sleep(ctx, wait) {
				r.send(c, id)
			}
		}()
	}
}

// remember records c's answer if it is its request's first OK, and
// returns the request id.
func (r *replayer) remember(c capture) string {
	id := requestID(c.method, c.req)
	if c.ok && id != "" {
		r.mu.Lock()
		if _, ok := r.firstOK[id]; !ok {
			r.firstOK[id] = c.resp
		}
		r.mu.Unlock()
	}
	return id
}

// send re-sends c to the member it first went to and, while the answer is
// UNAVAILABLE (not the leader, no leader yet, member down), to the others
// in turn, for up to 4 rounds half a second apart (an election's length):
// a duplicate that only ever meets a follower tests nothing.
func (r *replayer) send(c capture, id string) {
	method := strings.TrimPrefix(c.method, methodPrefix)
	var resp []byte
	var err error
	var (
		calls []int64 // when each attempt was sent
		errs  []error // and its answer
	)
	for k := range 4 * len(r.conns) {
		if k > 0 && k%len(r.conns) == 0 {
			time.Sleep(500 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.ttl+2*time.Second)
		req := c.req
		resp = nil
		calls = append(calls, Mono())
		err = r.conns[(c.member+k)%len(r.conns)].Invoke(ctx, c.method, &req, &resp)
		cancel()
		errs = append(errs, err)
		if status.Code(err) != codes.Unavailable {
			break
		}
	}
	answer := ""
	switch st, _ := status.FromError(err); {
	case err == nil:
		r.mu.Lock()
		first, seen := r.firstOK[id]
		r.mu.Unlock()
		if !seen {
			answer = ReplayOKUnseen + " " + method
			r.mu.Lock()
			r.unseen = append(r.unseen, unseenReplay{c: c, id: id, resp: string(resp)})
			r.mu.Unlock()
			break
		}
		answer = r.compare(c, first, resp)
	case st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), answeredMarker):
		answer = ReplayAnswered
	default:
		answer = "other " + method + " " + st.Code().String()
	}
	first := "ok"
	if !c.ok {
		first = c.err.Code().String() + ": " + c.err.Message()
	}
	r.note("replay %s (first answered %v ago, %s): %s (%v)", method, time.Duration(Mono()-c.at).Round(time.Millisecond), first, answer, err)
	r.mu.Lock()
	for _, o := range replayedProclaims(c, calls, errs) {
		o.Seq = len(r.puts) + 1
		r.puts = append(r.puts, o)
	}
	r.counts.Sent++
	r.counts.ByMethod[method]++
	r.counts.Answers[answer]++
	r.mu.Unlock()
}

// compare classifies an OK answer to a replay against the first OK answer
// of its request, and records a violation if the server acted again.
func (r *replayer) compare(c capture, first, resp []byte) string {
	method := strings.TrimPrefix(c.method, methodPrefix)
	switch {
	case bytes.Equal(first, resp):
		return ReplayFromMemory
	case sameGrant(c.method, first, resp):
		return "ok-different " + method // allowed: see sameGrant
	}
	r.mu.Lock()
	r.acted = append(r.acted, Violation{Check: "a late duplicate is never acted on", Detail: fmt.Sprintf(
		"%s replayed %v after an answer passed the proxy: the worker's OK answer was %x, the replay's %x", method,
		time.Duration(Mono()-c.at).Round(time.Millisecond), first, resp)})
	r.mu.Unlock()
	return ReplayActedAgain
}

// sameGrant reports whether two OK answers of a call mean the same thing:
// for Acquire, the same token (a different one is a second grant); other
// calls' answers may differ on a retry by design (a CreateLease retry after
// the lease ended starts a new lease, a Revoke retry releases nothing).
func sameGrant(method string, a, b []byte) bool {
	if method != methodAcquire {
		return true
	}
	var x, y api.AcquireResponse
	if proto.Unmarshal(a, &x) != nil || proto.Unmarshal(b, &y) != nil {
		return false
	}
	return x.Token == y.Token
}

// wait waits for the replays in flight; call it after run returned.
func (r *replayer) wait() { r.wg.Wait() }

// replayedProclaims are a replayed Put to an election's key as the
// proclaims it repeats (none for any other replay), one per attempt: the
// election's history must explain their effects, as it does a worker's own
// late duplicates. calls and errs are the attempts' send times and answers
// (see send). An attempt answered UNAVAILABLE may have been applied (a
// member also answers so when its leadership ended after it appended the
// entry), at any moment after it was sent: it is an operation of unknown
// outcome of its own, so that two attempts that both land are two points in
// time, not one. The last attempt has the outcome its answer gives.
func replayedProclaims(c capture, calls []int64, errs []error) []*Op {
	var put api.PutRequest
	if c.method != methodPut || proto.Unmarshal(c.req, &put) != nil || !isElection(put.GetKey()) {
		return nil
	}
	ops := make([]*Op, len(errs))
	for i, err := range errs {
		o := &Op{Client: "replay", Kind: "proclaim", Lock: put.GetKey(), Token: put.GetToken(), Value: string(put.GetValue()), Call: calls[i]}
		switch {
		case err == nil:
			o.Outcome, o.Return = OK, Mono()
		case status.Code(err) == codes.FailedPrecondition:
			o.Outcome, o.Return = Stale, Mono()
		default: // it may have been applied
			o.Outcome = Unknown
		}
		ops[i] = o
	}
	return ops
}

// proclaims returns the replayed proclaims (see replayedProclaims).
func (r *replayer) proclaims() []*Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.puts
}

// result returns the counts and violations, once every replay is done. A
// replay answered OK before the worker's own OK answer is compared now.
func (r *replayer) result() (ReplayCounts, []Violation) {
	for drained := false; !drained; { // what passed the proxy after run returned
		select {
		case c := <-r.in:
			r.remember(c)
		default:
			drained = true
		}
	}
	r.mu.Lock()
	unseen := r.unseen
	r.unseen = nil
	r.mu.Unlock()
	for _, u := range unseen {
		r.mu.Lock()
		first, seen := r.firstOK[u.id]
		r.mu.Unlock()
		if !seen {
			continue
		}
		answer := r.compare(u.c, first, []byte(u.resp))
		r.mu.Lock()
		r.counts.Answers[ReplayOKUnseen+" "+strings.TrimPrefix(u.c.method, methodPrefix)]--
		r.counts.Answers[answer+" (before the worker's)"]++
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range r.counts.Answers {
		if v == 0 {
			delete(r.counts.Answers, k)
		}
	}
	return r.counts, r.acted
}

func (r *replayer) close() { relay.Close(r.conns) }
