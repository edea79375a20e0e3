package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Names that spell the fixed labels get no label of their own and take no
// place under the cap: "(other)/x" is the prefix "(other)/", and with ")"
// as the separator "(other)" and "(none)" land in those very buckets.
func TestPrefixFixedLabelsNotSpoofed(t *testing.T) {
	zero := func() float64 { return 0 }
	for _, tc := range []struct {
		sep   string
		name  string
		want  string
		count int // admitted labels after it
	}{
		{"/", "(other)/x", "(other)/", 1},
		{"/", "(none)", NoPrefix, 0},
		{")", "(other)", OtherPrefix, 0},
		{")", "(none)x", NoPrefix, 0},
	} {
		m := NewServer(prometheus.NewRegistry(), Gauges{Leases: zero, Locks: zero, Waiters: zero, IsLeader: zero,
			Prefixes: PrefixConfig{Separator: tc.sep, Depth: 1, Max: 5}})
		if got := m.PrefixLabel(tc.name); got != tc.want {
			t.Errorf("%q with %q: label %q, want %q", tc.name, tc.sep, got, tc.want)
		}
		if m.prefixes.count != tc.count || len(m.prefixes.by) != 2+tc.count {
			t.Errorf("%q with %q: %d admitted, %d labels; want %d and %d", tc.name, tc.sep, m.prefixes.count, len(m.prefixes.by), tc.count, 2+tc.count)
		}
	}
}
