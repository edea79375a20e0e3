package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netHost is where one node runs: an address on a private bridge, inside
// its own network namespace.
type netHost struct {
	ip, netns, veth string // veth is the bridge-side end, downed to cut the node off
}

// netnsLab builds a bridge with n network namespaces on it (10.77.X.1…n, the
// bridge itself .254) and tears everything down when the test ends. It needs
// root and iproute2; it skips otherwise, unless FENCE_REQUIRE_NETNS=1.
func netnsLab(t *testing.T, n int) []netHost {
	t.Helper()
	if os.Geteuid() != 0 {
		requireOrSkip(t, "network-namespace tests need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		requireOrSkip(t, "network-namespace tests need iproute2 ('ip')")
	}
	b := make([]byte, 3)
	rand.Read(b)
	tag := hex.EncodeToString(b)
	subnet := fmt.Sprintf("10.77.%d", int(b[0])%250+1)
	bridge := "fb" + tag
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		for i := 1; i <= n; i++ {
			exec.Command("ip", "netns", "del", fmt.Sprintf("fence-%s-%d", tag, i)).Run()
		}
		exec.Command("ip", "link", "del", bridge).Run()
	})
	run("link", "add", bridge, "type", "bridge")
	run("addr", "add", subnet+".254/24", "dev", bridge)
	run("link", "set", bridge, "up")
	var hosts []netHost
	for i := 1; i <= n; i++ {
		h := netHost{ip: fmt.Sprintf("%s.%d", subnet, i), netns: fmt.Sprintf("fence-%s-%d", tag, i), veth: fmt.Sprintf("fv%s%d", tag, i)}
		run("netns", "add", h.netns)
		run("link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
		run("link", "set", h.veth, "master", bridge, "up")
		run("netns", "exec", h.netns, "ip", "addr", "add", h.ip+"/24", "dev", "eth0")
		run("netns", "exec", h.netns, "ip", "link", "set", "eth0", "up")
		run("netns", "exec", h.netns, "ip", "link", "set", "lo", "up")
		hosts = append(hosts, h)
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
func (h netHost) cut(t *testing.T)  { ipLink(t, h.veth, "down") }
func (h netHost) heal(t *testing.T) { ipLink(t, h.veth, "up") }

func ipLink(t *testing.T, dev, state string) {
	if out, err := exec.Command("ip", "link", "set", dev, state).CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s %s: %v %s", dev, state, err, out)
	}
}
