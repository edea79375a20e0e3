package e2e

import (
	"os"
	"testing"

	"github.com/fencehq/fence/internal/netlab"
)

// netHost is where one node runs: an address on a private bridge, inside
// its own network namespace.
type netHost struct {
	netlab.Host
	lab *netlab.Lab
}

// netnsLab builds a bridge with n network namespaces on it and tears
// everything down when the test ends. It needs root and iproute2; it skips
// otherwise, unless FENCE_REQUIRE_NETNS=1.
func netnsLab(t *testing.T, n int) []netHost {
	t.Helper()
	if err := netlab.Available(); err != nil {
		requireOrSkip(t, err.Error())
	}
	lab, err := netlab.New(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	var hosts []netHost
	for _, h := range lab.Hosts {
		hosts = append(hosts, netHost{Host: h, lab: lab})
	}
	return hosts
}

func requireOrSkip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("FENCE_REQUIRE_NETNS") == "1" {
		t.Fatal(why + " (FENCE_REQUIRE_NETNS=1)")
	}
	t.Skip(why)
}

// cut takes a node off the network (both ways); heal puts it back.
func (h netHost) cut(t *testing.T) {
	if err := h.lab.Cut(h.Host); err != nil {
		t.Fatal(err)
	}
}

func (h netHost) heal(t *testing.T) {
	if err := h.lab.Heal(h.Host); err != nil {
		t.Fatal(err)
	}
}
