package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Cut keeps a name up to its Depth-th separator (or its last), never the
// whole name; a name without the separator is (none).
func TestPrefixCut(t *testing.T) {
	for _, tc := range []struct {
		sep   string
		depth int
		name  string
		want  string
	}{
		{"/", 1, "jobs/nightly/x", "jobs/"},
		{"/", 2, "jobs/nightly/x", "jobs/nightly/"},
		{"/", 3, "jobs/nightly/x", "jobs/nightly/"}, // fewer separators than depth: up to the last
		{"/", 1, "nightly", NoPrefix},
		{"/", 1, "/x", "/"},
		{"::", 1, "db::users::42", "db::"},
		{".", 2, "a.b.c", "a.b."},
	} {
		if got := (PrefixConfig{Separator: tc.sep, Depth: tc.depth}).Cut(tc.name); got != tc.want {
			t.Errorf("Cut(%q) with %q×%d = %q, want %q", tc.name, tc.sep, tc.depth, got, tc.want)
		}
	}
}

// The first Max prefixes seen keep their label, later ones are (other),
// and a known one stays known; (none) does not count against the cap.
func TestPrefixCap(t *testing.T) {
	zero := func() float64 { return 0 }
	m := NewServer(prometheus.NewRegistry(), Gauges{Leases: zero, Locks: zero, Waiters: zero, IsLeader: zero,
		Prefixes: PrefixConfig{Separator: "/", Depth: 1, Max: 2}})
	for _, tc := range []struct{ name, want string }{
		{"flat", NoPrefix}, {"a/1", "a/"}, {"b/1", "b/"}, {"c/1", OtherPrefix}, {"a/2", "a/"}, {"flat2", NoPrefix}, {"d/1", OtherPrefix},
	} {
		if got := m.PrefixLabel(tc.name); got != tc.want {
			t.Errorf("PrefixLabel(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Validate names the flag of each bad setting.
func TestPrefixConfigValidate(t *testing.T) {
	// "\xc3" (a lead byte alone) would cut "aÀb" (a, c3 80, b) to "a\xc3",
	// a label Prometheus refuses with a panic on the apply path.
	for _, c := range []PrefixConfig{{"", 1, 1}, {"/", 0, 1}, {"/", 17, 1}, {"/", 1, -1}, {"/", 1, MaxPrefixes + 1}, {"\xc3", 1, 1}} {
		if c.Validate() == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	if err := DefaultPrefixConfig().Validate(); err != nil {
		t.Errorf("default: %v", err)
	}
}
