// Package bench drives load against a fence server or cluster and measures
// throughput and latency (HDR histograms). It backs `fence bench`. Every
// loop stops at Config.Duration or Config.MaxOps, whichever comes first.
package bench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Workloads.
const (
	Uncontended = "uncontended" // each client locks and releases its own lock
	Contended   = "contended"   // all clients wait in line for one lock
	RenewHeavy  = "renew-heavy" // leases renewed as fast as the server answers
	ManyLeases  = "many-leases" // create leases (and keep them) as fast as possible
	Mixed       = "mixed"       // half uncontended cycles, half renewals
)

// setupTimeout bounds connecting and creating leases: the run's duration,
// but at least 2s and at most 10s.
func (r *run) setupTimeout() time.Duration {
	return min(10*time.Second, max(2*time.Second, r.cfg.Duration))
}

// Workloads lists them, for help texts.
var Workloads = []string{Uncontended, Contended, RenewHeavy, ManyLeases, Mixed}

// Config is one run.
type Config struct {
	// Target is the system under load; nil means fence at Servers.
	Target  Target
	Servers []string
	// TLS is how the fence at Servers is reached (see Fence.TLS).
	TLS      *tls.Config
	Workload string
	Clients  int           // concurrent workers
	Duration time.Duration // stop after this long
	MaxOps   int64         // or after this many operations
	TTL      time.Duration // of the leases the run creates
	Window   int           // renewals in flight per stream (renew-heavy)
	// Relock: the cycle workloads (Cycles) hold the lock between
	// operations and take it again with one relock call (fence's
	// Lease.Relock: release and lock again in one log entry) instead of a
	// release and then a lock; each operation is still one grant. The
	// target's Locker must be a Relocker (ErrUnsupported otherwise).
	Relock bool
}

// Cycles reports whether workload locks and releases (uncontended,
// contended, mixed): the workloads Config.Relock applies to.
func Cycles(workload string) bool {
	return workload == Uncontended || workload == Contended || workload == Mixed
}

// Validate checks cfg.
func (c *Config) Validate() error {
	switch {
	case len(c.Servers) == 0 && c.Target == nil:
		return errors.New("no server address")
	case c.Clients < 1 || c.Clients > 10000:
		return fmt.Errorf("clients %d outside 1…10000", c.Clients)
	case c.Duration <= 0 || c.Duration > time.Hour:
		return fmt.Errorf("duration %v outside 0…1h", c.Duration)
	case c.MaxOps < 1:
		return fmt.Errorf("max ops %d must be positive", c.MaxOps)
	case c.TTL < time.Second:
		return fmt.Errorf("TTL %v below the server's default minimum of 1s", c.TTL)
	case c.Window < 1:
		return fmt.Errorf("window %d must be at least 1", c.Window)
	case c.Relock && !Cycles(c.Workload):
		return fmt.Errorf("relock applies to the workloads that lock and release (%s, %s, %s), not %q", Uncontended, Contended, Mixed, c.Workload)
	}
	for _, w := range Workloads {
		if w == c.Workload {
			return nil
		}
	}
	return fmt.Errorf("unknown workload %q (one of %v)", c.Workload, Workloads)
}

// Latency summarises one operation's latencies.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Result is what a run measured.
type Result struct {
	System    string             `json:"system"`
	Workload  string             `json:"workload"`
	Clients   int                `json:"clients"`
	Seconds   float64            `json:"seconds"`
	Ops       int64              `json:"ops"`
	OpsPerSec float64            `json:"ops_per_sec"`
	Errors    int64              `json:"errors"`
	FirstErr  string             `json:"first_error,omitempty"`
	Unit      string             `json:"unit"` // what one op is
	Latency   map[string]Latency `json:"latency"`
}

// recorder collects latencies per operation name. Safe for concurrent use.
type recorder struct {
	mu    sync.Mutex
	hists map[string]*hdrhistogram.Histogram
}

func (r *recorder) record(op string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hists[op]
	if h == nil {
		h = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3) // µs, 3 significant digits
		r.hists[op] = h
	}
	h.RecordValue(max(1, d.Microseconds()))
}

func (r *recorder) summary() map[string]Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Latency{}
	ms := func(v int64) float64 { return float64(v) / 1000 }
	for op, h := range r.hists {
		out[op] = Latency{Count: h.TotalCount(), P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)),
			P99: ms(h.ValueAtQuantile(99)), P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max())}
	}
	return out
}

// run is the shared state of one run.
type run struct {
	cfg      Config
	rec      recorder
	ops      atomic.Int64
	errs     atomic.Int64
	firstErr atomic.Value // string
}

// over reports whether the run's time is up. gRPC fails calls at the
// deadline a moment before ctx.Err() reports it, so look at the clock too.
func over(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(d)
}

// fail counts a failed operation and keeps the first error for the report.
func (r *run) fail(err error) {
	r.errs.Add(1)
	r.firstErr.CompareAndSwap(nil, err.Error())
}

// take reserves one operation; false once the run's time is up or MaxOps
// operations are reserved. Operations already under way finish.
func (r *run) take(ctx context.Context) bool {
	if over(ctx) {
		return false
	}
	if r.ops.Add(1) > r.cfg.MaxOps {
		r.ops.Add(-1)
		return false
	}
	return true
}

// Run performs one run and returns its measurements.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	if cfg.Target == nil {
		cfg.Target = Fence{Servers: cfg.Servers, TTL: cfg.TTL, TLS: cfg.TLS}
	}
	r := &run{cfg: cfg, rec: recorder{hists: map[string]*hdrhistogram.Histogram{}}}
	var unit string
	var work func(ctx context.Context, worker int) error
	switch cfg.Workload {
	case Uncontended:
		unit, work = "lock+release cycle", r.cycles(false)
	case Contended:
		unit, work = "handoff (lock+release of the one lock)", r.cycles(true)
	case RenewHeavy:
		unit, work = "renewal", r.renewals
	case ManyLeases:
		unit, work = "lease created", r.createLeases
	case Mixed:
		cyc := r.cycles(false)
		unit, work = "cycle or renewal", func(ctx context.Context, w int) error {
			if w%2 == 0 {
				return cyc(ctx, w)
			}
			return r.renewals(ctx, w)
		}
	}
	if cfg.Relock {
		unit = map[string]string{Uncontended: "relock (release and lock again in one call)",
			Contended: "handoff (a relock of the one lock)", Mixed: "relock or renewal"}[cfg.Workload]
	}
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Clients)
	for w := 0; w < cfg.Clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(ctx, w); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("bench %s: %w", cfg.Workload, err)
	}
	ops := r.ops.Load()
	if ops == 0 {
		return nil, fmt.Errorf("bench %s: no operation completed in %v (is %s up?)", cfg.Workload, cfg.Duration, cfg.Target.Name())
	}
	first, _ := r.firstErr.Load().(string)
	return &Result{System: cfg.Target.Name(), Workload: cfg.Workload, Clients: cfg.Clients, Seconds: elapsed.Seconds(), Ops: ops,
		OpsPerSec: float64(ops) / elapsed.Seconds(), Errors: r.errs.Load(), FirstErr: first, Unit: unit, Latency: r.rec.summary()}, nil
}

// cycles: each worker has its own connection and session and locks and
// releases its own lock, or the one shared lock.
func (r *run) cycles(shared bool) func(ctx context.Context, w int) error {
	return func(ctx context.Context, w int) error {
		setup, cancel := context.WithTimeout(context.Background(), r.setupTimeout())
		defer cancel()
		lk, err := r.cfg.Target.Locker(setup, w)
		if err != nil {
			return err
		}
		defer lk.Close()
		name := fmt.Sprintf("bench/%s/%d", randomTag(), w)
		if shared {
			name = "bench/contended"
		}
		if r.cfg.Relock {
			rl, ok := lk.(Relocker)
			if !ok {
				return fmt.Errorf("relock: %w", ErrUnsupported)
			}
			r.relocks(ctx, rl, name)
			return nil
		}
		for r.take(ctx) {
			t0 := time.Now()
			release, err := lk.Lock(ctx, name)
			if err != nil {
				if !over(ctx) {
					r.fail(err)
				}
				r.ops.Add(-1)
				continue
			}
			t1 := time.Now()
			if err := release(context.WithoutCancel(ctx)); err != nil {
				r.fail(err)
			}
			t2 := time.Now()
			r.rec.record("lock", t1.Sub(t0))
			r.rec.record("release", t2.Sub(t1))
			r.rec.record("cycle", t2.Sub(t0))
		}
		return nil
	}
}

// relocks is the cycle loop of Config.Relock: the worker takes name once
// ("lock"), then, each operation, releases and takes it again in one call
// ("relock"; after a failed one, a plain lock again); "cycle" is every
// operation, one grant each. It releases the grant it holds at the end.
func (r *run) relocks(ctx context.Context, lk Relocker, name string) {
	var g Grant
	for r.take(ctx) {
		t0 := time.Now()
		op := "lock"
		var err error
		if g == nil {
			g, err = lk.Hold(ctx, name)
		} else {
			op = "relock"
			g, err = g.Relock(ctx)
		}
		if err != nil {
			g = nil
			if !over(ctx) {
				r.fail(err)
			}
			r.ops.Add(-1)
			continue
		}
		d := time.Since(t0)
		r.rec.record(op, d)
		r.rec.record("cycle", d)
	}
	if g != nil {
		if err := g.Release(context.WithoutCancel(ctx)); err != nil {
			r.fail(err)
		}
	}
}

// renewals: each worker has a lease and a renewal stream with Window
// renewals in flight; latency is send → answer.
func (r *run) renewals(ctx context.Context, w int) error {
	setup, cancel := context.WithTimeout(context.Background(), r.setupTimeout())
	defer cancel()
	rn, err := r.cfg.Target.Renewer(setup, w)
	if err != nil {
		return err
	}
	defer rn.Close()
	var (
		mu   sync.Mutex
		sent = map[uint64]time.Time{}
	)
	slots := make(chan struct{}, r.cfg.Window)
	go func() {
		for {
			seq, ok, err := rn.Recv()
			if err != nil {
				return
			}
			mu.Lock()
			t0, known := sent[seq]
			delete(sent, seq)
			mu.Unlock()
			if known {
				r.rec.record("renew", time.Since(t0))
			}
			if !ok {
				r.fail(errors.New("renewal answered: lease not found"))
			}
			<-slots
		}
	}()
	for seq := uint64(1); r.take(ctx); seq++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			r.ops.Add(-1)
			return nil
		}
		mu.Lock()
		sent[seq] = time.Now()
		mu.Unlock()
		if err := rn.Send(seq); err != nil {
			return nil
		}
	}
	// Let the answers in flight arrive (bounded; Close ends the stream).
	for waited := time.Now(); len(slots) > 0 && time.Since(waited) < 2*time.Second; {
		time.Sleep(time.Millisecond)
	}
	return nil
}

// createLeases: each worker creates leases and keeps them (they expire after
// the TTL), to load the server with many live leases.
func (r *run) createLeases(ctx context.Context, w int) error {
	lc, ok := r.cfg.Target.(LeaseCreator)
	if !ok {
		return fmt.Errorf("%s: many-leases: %w", r.cfg.Target.Name(), ErrUnsupported)
	}
	create, closeFn, err := lc.LeaseCreator(ctx, w, r.cfg.TTL)
	if err != nil {
		return err
	}
	defer closeFn()
	for r.take(ctx) {
		t0 := time.Now()
		if err := create(ctx); err != nil {
			if !errors.Is(err, ErrTryAgain) && !over(ctx) {
				r.fail(err)
			}
			r.ops.Add(-1)
			continue
		}
		r.rec.record("create-lease", time.Since(t0))
	}
	return nil
}

func randomTag() string {
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// OpNames returns the operation names of a result, sorted, for printing.
func (res *Result) OpNames() []string {
	var ops []string
	for op := range res.Latency {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}
