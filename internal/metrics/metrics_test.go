package metrics

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
