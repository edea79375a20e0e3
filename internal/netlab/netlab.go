// Package netlab builds throwaway network namespaces on a private bridge so
// tests can run servers on separate addresses and cut them off from each
// other for real (links down, routes blackholed). It needs root and iproute2.
package netlab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Host is one network namespace on the lab's bridge.
type Host struct {
	IP    string // its address on the bridge
	Netns string // the namespace's name, for `ip netns exec`
	veth  string // the bridge-side end of its link
}

// Lab is a bridge (address Gateway, reachable from this namespace) with
// hosts on it. Close removes everything.
type Lab struct {
	Gateway string
	Hosts   []Host
	bridge  string
}

// Available reports why a lab cannot be built here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("network namespaces need iproute2 ('ip')")
	}
	return nil
}

// New builds a bridge with n namespaces on a random 10.77.X.0/24 (hosts
// .1…n, the bridge .254).
func New(n int) (*Lab, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	b := make([]byte, 3)
	rand.Read(b)
	tag := hex.EncodeToString(b)
	subnet := fmt.Sprintf("10.77.%d", int(b[0])%250+1)
	lab := &Lab{Gateway: subnet + ".254", bridge: "fb" + tag}
	if err := lab.build(n, subnet, tag); err != nil {
		lab.Close()
		return nil, err
	}
	return lab, nil
}

func (lab *Lab) build(n int, subnet, tag string) error {
	if err := ip("link", "add", lab.bridge, "type", "bridge"); err != nil {
		return err
	}
	if err := ip("addr", "add", lab.Gateway+"/24", "dev", lab.bridge); err != nil {
		return err
	}
	if err := ip("link", "set", lab.bridge, "up"); err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		h := Host{IP: fmt.Sprintf("%s.%d", subnet, i), Netns: fmt.Sprintf("fence-%s-%d", tag, i), veth: fmt.Sprintf("fv%s%d", tag, i)}
		if err := ip("netns", "add", h.Netns); err != nil {
			return err
		}
		lab.Hosts = append(lab.Hosts, h)
		for _, args := range [][]string{
			{"link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.Netns},
			{"link", "set", h.veth, "master", lab.bridge, "up"},
			{"-n", h.Netns, "addr", "add", h.IP + "/24", "dev", "eth0"},
			{"-n", h.Netns, "link", "set", "eth0", "up"},
			{"-n", h.Netns, "link", "set", "lo", "up"},
		} {
			if err := ip(args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close deletes the namespaces and the bridge.
func (lab *Lab) Close() {
	for _, h := range lab.Hosts {
		_ = exec.Command("ip", "netns", "del", h.Netns).Run()
	}
	_ = exec.Command("ip", "link", "del", lab.bridge).Run()
}

// Cut takes h off the network, both ways and for everyone.
func (lab *Lab) Cut(h Host) error { return ip("link", "set", h.veth, "down") }

// Heal undoes Cut.
func (lab *Lab) Heal(h Host) error { return ip("link", "set", h.veth, "up") }

// Isolate cuts h off from the other hosts only: packets between them are
// dropped (blackhole routes on both sides), while the gateway — this
// namespace, where clients run — still reaches every host.
func (lab *Lab) Isolate(h Host) error { return lab.routes(h, "add") }

// Rejoin undoes Isolate.
func (lab *Lab) Rejoin(h Host) error { return lab.routes(h, "del") }

func (lab *Lab) routes(h Host, op string) error {
	var errs []error
	for _, o := range lab.Hosts {
		if o == h {
			continue
		}
		errs = append(errs, ip("-n", h.Netns, "route", op, "blackhole", o.IP+"/32"),
			ip("-n", o.Netns, "route", op, "blackhole", h.IP+"/32"))
	}
	return errors.Join(errs...)
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
