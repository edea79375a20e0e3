package metrics

import (
	"fmt"
	"maps"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A server's registry carries fence_build_info, 1, labelled as 'fence version'.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	zero := func() float64 { return 0 }
	NewServer(reg, Gauges{Leases: zero, Locks: zero, Waiters: zero, IsLeader: zero})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fence_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["goversion"] != runtime.Version() || labels["version"] == "" {
			t.Fatalf("fence_build_info %v = %v", labels, m.GetGauge().GetValue())
		}
		return
	}
	t.Fatal("no fence_build_info")
}

// ObserveHold keeps every hold's seconds, and its share of the TTL when the
// TTL is known.
func TestObserveHold(t *testing.T) {
	reg := prometheus.NewRegistry()
	zero := func() float64 { return 0 }
	m := NewServer(reg, Gauges{Leases: zero, Locks: zero, Waiters: zero, IsLeader: zero})
	m.Prefix("jobs/a").ObserveHold("released", 20*time.Second, 30*time.Second)
	m.Prefix("b").ObserveHold("expired", 30*time.Second, 0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil && strings.HasPrefix(mf.GetName(), "fence_lock_hold") {
				got[mf.GetName()+" "+labelString(m)] = fmt.Sprintf("%d %.4g", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	want := map[string]string{
		`fence_lock_hold_seconds cause="released",prefix="jobs/"`: "1 20", `fence_lock_hold_seconds cause="expired",prefix="(none)"`: "1 30",
		`fence_lock_hold_ttl_ratio cause="released",prefix="jobs/"`: "1 0.6667",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("hold histograms %v, want %v", got, want)
	}
}

// labelString is a metric's labels as name="value", comma-separated, in
// the order Gather gives them (by name).
func labelString(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return strings.Join(parts, ",")
}
