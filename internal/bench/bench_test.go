package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
)

func TestWorkloads(t *testing.T) {
	addr := locktest.Start(t).GRPCAddr()
	for _, w := range Workloads {
		t.Run(w, func(t *testing.T) {
			cfg := Config{Servers: []string{addr}, Workload: w, Clients: 4, Duration: 300 * time.Millisecond,
				MaxOps: 1 << 40, TTL: 5 * time.Second, Window: 8}
			res := runBounded(t, cfg)
			if res.Ops == 0 || res.Errors != 0 || len(res.Latency) == 0 {
				t.Fatalf("%s: %+v", w, res)
			}
			for op, l := range res.Latency {
				if !(l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) || l.Count == 0 {
					t.Fatalf("%s/%s: percentiles out of order: %+v", w, op, l)
				}
			}
		})
	}
}

func TestMaxOpsStopsTheRun(t *testing.T) {
	addr := locktest.Start(t).GRPCAddr()
	res := runBounded(t, Config{Servers: []string{addr}, Workload: Uncontended, Clients: 3, Duration: time.Hour,
		MaxOps: 50, TTL: 5 * time.Second, Window: 1})
	if res.Ops != 50 || res.Latency["cycle"].Count != 50 {
		t.Fatalf("ops %d, cycles recorded %d; want 50", res.Ops, res.Latency["cycle"].Count)
	}
}

// TestRelockWorkloads: the cycle workloads with Relock hold the lock and
// relock it: every operation after a worker's first is a relock, each a
// grant (the tokens grow), without errors, and the run releases what it
// holds at the end (the contended lock is free after).
func TestRelockWorkloads(t *testing.T) {
	srv := locktest.Start(t)
	addr := srv.GRPCAddr()
	for _, w := range []string{Uncontended, Contended} {
		t.Run(w, func(t *testing.T) {
			res := runBounded(t, Config{Servers: []string{addr}, Workload: w, Clients: 4, Duration: time.Hour,
				MaxOps: 200, TTL: 5 * time.Second, Window: 1, Relock: true})
			if res.Unit == "" || !strings.Contains(res.Unit, "relock") {
				t.Fatalf("unit %q does not say relock", res.Unit)
			}
			lock, relock := res.Latency["lock"].Count, res.Latency["relock"].Count
			if res.Errors != 0 || res.Ops != 200 || lock != 4 || lock+relock != 200 || res.Latency["release"].Count != 0 {
				t.Fatalf("%s: %d ops, %d locks, %d relocks, %d releases, %d errors (%s); want 200 ops: 4 locks, 196 relocks",
					w, res.Ops, lock, relock, res.Latency["release"].Count, res.Errors, res.FirstErr)
			}
		})
	}
	c, err := client.Dial(context.Background(), []string{addr}, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(context.Background(), "bench/contended")
	if err != nil {
		t.Fatalf("the contended lock after the runs: %v; want it free", err)
	}
	if l.Token() != 401 {
		t.Fatalf("the next grant has token %d; want 401 (the 400 operations were a grant each)", l.Token())
	}
}

func TestConfigRefusals(t *testing.T) {
	good := Config{Servers: []string{"x:1"}, Workload: Mixed, Clients: 1, Duration: time.Second, MaxOps: 1, TTL: time.Second, Window: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []func(*Config){
		func(c *Config) { c.Servers = nil }, func(c *Config) { c.Workload = "fast" }, func(c *Config) { c.Clients = 0 },
		func(c *Config) { c.Duration = 0 }, func(c *Config) { c.MaxOps = 0 }, func(c *Config) { c.TTL = 0 }, func(c *Config) { c.Window = 0 },
		func(c *Config) { c.Relock, c.Workload = true, RenewHeavy },
	} {
		c := good
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

// runBounded runs cfg and fails if the run does not stop by itself (a
// liveness check: every load loop must end at its duration or op count).
func runBounded(t *testing.T, cfg Config) *Result {
	t.Helper()
	type out struct {
		res *Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := Run(context.Background(), cfg)
		done <- out{res, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			t.Fatal(o.err)
		}
		return o.res
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop by itself", cfg.Workload)
		return nil
	}
}

func TestUnreachableServerIsAnError(t *testing.T) {
	for _, w := range []string{Uncontended, RenewHeavy} {
		_, err := Run(context.Background(), Config{Servers: []string{"127.0.0.1:1"}, Workload: w, Clients: 1,
			Duration: 200 * time.Millisecond, MaxOps: 10, TTL: time.Second, Window: 1})
		if err == nil {
			t.Fatalf("%s against nothing reported success", w)
		}
	}
}
