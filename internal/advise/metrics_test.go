package advise

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/fencing/fencingmetrics"
	"github.com/fencehq/fence/internal/metrics"
)

// exposition renders reg as the text a /metrics endpoint serves.
func exposition(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// server is a fence server's metrics, fed by hand: the same collectors and
// names the server registers.
func server() (*prometheus.Registry, *metrics.Server) {
	reg := prometheus.NewRegistry()
	zero := func() float64 { return 0 }
	return reg, metrics.NewServer(reg, metrics.Gauges{Leases: zero, Locks: zero, Waiters: zero, IsLeader: zero})
}

// holds observes n released grants each held for held under a ttl lease.
func holds(m *metrics.Server, n int, held, ttl time.Duration) {
	for range n {
		m.Grants.Inc()
		m.Prefix("jobs/x").ObserveHold("released", held, ttl)
	}
}

func TestJudge(t *testing.T) {
	const ttl = 30 * time.Second
	for _, tc := range []struct {
		name    string
		work    func(m *metrics.Server)
		storage func(o *fencingmetrics.Observer) // a storage service's scrape, if any
		want    Verdict
		finding string
	}{
		{"the guide's TTL: p99 run 20 s under 30 s", func(m *metrics.Server) { holds(m, 100, 20*time.Second, ttl) }, nil,
			AboutRight, "within 0.67 × their TTL"},
		{"renewed holds outlast the TTL", func(m *metrics.Server) { holds(m, 100, 90*time.Second, ttl); m.Renewals.Add(800) }, nil,
			AboutRight, "within 5 × their TTL"},
		{"p99 hold near the TTL", func(m *metrics.Server) {
			holds(m, 90, 20*time.Second, ttl)
			holds(m, 10, 27*time.Second, ttl) // 0.9 of the TTL
		}, nil, TooShort, "within 0.9 × their TTL, but not within 0.8 ×"},
		{"a failed renewal", func(m *metrics.Server) { holds(m, 100, 20*time.Second, ttl); m.RenewalsFailed.Inc() }, nil,
			TooShort, "1 renewals arrived after their lease had ended"},
		{"a stale write refused by the fenced store", func(m *metrics.Server) { holds(m, 100, 20*time.Second, ttl); m.StaleWrites.Inc() }, nil,
			TooShort, "1 stale writes were refused"},
		{"stale writes refused by fencing", func(m *metrics.Server) { holds(m, 100, 20*time.Second, ttl) },
			func(o *fencingmetrics.Observer) {
				o.Stale("totals", fencing.Enforce, 33, 34)
				o.Stale("totals", fencing.Enforce, 33, 34)
			},
			TooShort, "2 stale writes were refused"},
		{"stale writes let through by observe mode", func(m *metrics.Server) { holds(m, 100, 20*time.Second, ttl) },
			func(o *fencingmetrics.Observer) { o.Stale("totals", fencing.Observe, 33, 34) },
			TooShort, "let through by fencing's observe mode"},
		{"2 of 102 grants expired", func(m *metrics.Server) {
			holds(m, 100, 20*time.Second, ttl)
			m.Prefix("jobs/x").ObserveHold("expired", ttl, ttl)
			m.Prefix("jobs/x").ObserveHold("expired", ttl, ttl)
		}, nil, TooShort, "2 of 102 grants ended by expiry (2.0%)"},
		{"1 of 100 grants expired", func(m *metrics.Server) {
			holds(m, 99, 20*time.Second, ttl)
			m.Prefix("jobs/x").ObserveHold("expired", ttl, ttl)
		}, nil, AboutRight, "no renewal failed"},
		{"holds far below the TTL", func(m *metrics.Server) { holds(m, 100, time.Second, ttl) }, nil,
			TooLong, "a TTL of 3s (1.5 × that, renewed every 1s) would do"}, // p99 ≤ 1.6 s (its bucket): 2.4 s, rounded up
		{"too few holds", func(m *metrics.Server) { holds(m, MinHolds-1, time.Second, ttl) }, nil,
			NotEnoughData, "only 9 grants were released so far"},
		{"one grant, expired: a crash, or a short lease", func(m *metrics.Server) { m.Prefix("jobs/x").ObserveHold("expired", ttl, ttl) }, nil,
			NotEnoughData, "only 0 grants were released so far"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, m := server()
			tc.work(m)
			var o Observed
			if err := o.ParseMetrics(strings.NewReader(exposition(t, reg))); err != nil {
				t.Fatal(err)
			}
			if tc.storage != nil {
				sreg := prometheus.NewRegistry()
				tc.storage(fencingmetrics.New(sreg))
				if err := o.ParseMetrics(strings.NewReader(exposition(t, sreg))); err != nil {
					t.Fatal(err)
				}
			}
			j := Judge(o)
			if j.Verdict != tc.want || !hasText(j.Findings, tc.finding) {
				t.Errorf("%q %q; want %q with %q", j.Verdict, j.Findings, tc.want, tc.finding)
			}
		})
	}
}

func TestJudgeOldServer(t *testing.T) {
	var o Observed
	if err := o.ParseMetrics(strings.NewReader("# TYPE fence_grants_total counter\nfence_grants_total 12\n")); err != nil {
		t.Fatal(err)
	}
	if j := Judge(o); o.Grants != 12 || j.Verdict != NotEnoughData || !hasText(j.Findings, "exports no hold times") {
		t.Fatalf("%+v %+v", o, j)
	}
	if err := o.ParseMetrics(strings.NewReader("<html>not metrics</html>")); err == nil {
		t.Fatal("HTML parsed as metrics")
	}
}

func TestQuantile(t *testing.T) {
	h := Histogram{Count: 100, Bounds: []float64{1, 2, 5}, Cumulative: []float64{50, 99, 99}}
	for q, want := range map[float64]float64{0.5: 1, 0.51: 2, 0.99: 2, 0.995: math.Inf(1)} {
		if got := h.Quantile(q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := (Histogram{}).Quantile(0.99); !math.IsNaN(got) {
		t.Errorf("empty: %v", got)
	}
}
