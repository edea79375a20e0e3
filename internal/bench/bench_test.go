package bench

import (
	"context"
	"testing"
	"time"

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

func TestConfigRefusals(t *testing.T) {
	good := Config{Servers: []string{"x:1"}, Workload: Mixed, Clients: 1, Duration: time.Second, MaxOps: 1, TTL: time.Second, Window: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []func(*Config){
		func(c *Config) { c.Servers = nil }, func(c *Config) { c.Workload = "fast" }, func(c *Config) { c.Clients = 0 },
		func(c *Config) { c.Duration = 0 }, func(c *Config) { c.MaxOps = 0 }, func(c *Config) { c.TTL = 0 }, func(c *Config) { c.Window = 0 },
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
