package e2e

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// TestClusterPartitionLeaderProcesses runs three real nodes, each in its own
// network namespace, and cuts the leader off from the others (its link goes
// down). Inside the cut-off namespace, where only the old leader is
// reachable: a new lock is not granted, and a `fence run` holder that could
// renew only there loses its lease and kills its command — the minority
// grants nothing and renews nothing. Outside, the majority elects a leader
// and carries on; a lease renewed through it survives. After healing, nothing
// the minority was asked took effect.
func TestClusterPartitionLeaderProcesses(t *testing.T) {
	hosts := netnsLab(t, 3)
	c := newClusterAt(t, 3, hosts, "--lock-delay", "0", "--min-ttl", "500ms")
	lead := c.leader()
	var leadHost netHost
	for i, nd := range c.nodes {
		if nd == lead {
			leadHost = hosts[i]
		}
	}
	// The kept lease must outlive a failover: its holder notices the cut
	// (a renewal unanswered for TTL/3), the majority elects (~1.3 s median,
	// 2.3 s worst measured), and the next renewal must land before
	// TTL − margin. A 2 s TTL does not leave that room; 6 s does.
	const keptTTL = 6 * time.Second
	cl := c.dial(client.WithTTL(keptTTL))
	kept, err := cl.Lock(timeout(t, 10*time.Second), "kept")
	if err != nil {
		t.Fatal(err)
	}

	// A holder inside the leader's namespace, talking only to the leader.
	inside := func(args ...string) *exec.Cmd {
		return exec.Command("ip", append([]string{"netns", "exec", leadHost.Netns, fenceBinary(t), "--server", lead.grpc}, append(cliTLS(t), args...)...)...)
	}
	holder := inside("run", "minority-held", "--ttl", "1s", "--grace", "200ms", "--", "sleep", "60")
	stderr, _ := holder.StderrPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(holder.Process.Pid, syscall.SIGKILL); holder.Wait() }()
	holderToken := waitAcquired(t, bufio.NewScanner(stderr))

	leadHost.cut(t)

	// The minority grants nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	args := append([]string{"netns", "exec", leadHost.Netns, fenceBinary(t), "--server", lead.grpc}, cliTLS(t)...)
	out, err := exec.CommandContext(ctx, "ip", append(args, "--connect-timeout", "2s", "lock", "minority-new", "--ttl", "1m", "--wait", "0")...).CombinedOutput()
	if err == nil {
		t.Fatalf("the cut-off leader granted a lock:\n%s", out)
	}
	// ...and renews nothing: its holder loses the lease and stops its command.
	waitErr := make(chan error, 1)
	go func() { waitErr <- holder.Wait() }()
	select {
	case err := <-waitErr:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 76 {
			t.Fatalf("holder inside the cut-off namespace ended with %v, want exit 76 (lease lost)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder inside the cut-off namespace kept its lease: the minority renewed it")
	}

	// The majority elects and carries on.
	l, err := cl.TryLock(timeout(t, 15*time.Second), "majority")
	if err != nil {
		t.Fatalf("the majority did not grant: %v", err)
	}
	if l.Token() <= holderToken || l.Token() <= kept.Token() {
		t.Fatalf("majority token %d not above %d and %d", l.Token(), holderToken, kept.Token())
	}
	time.Sleep(keptTTL) // a whole TTL: only renewals through the new leader keep it
	if err := kept.Err(); err != nil {
		t.Fatalf("a lease renewed through the majority was lost: %v", err)
	}

	leadHost.heal(t)
	time.Sleep(time.Second)
	for _, name := range []string{"minority-new"} {
		info, err := cl.Status(timeout(t, 10*time.Second), name)
		if err != nil || info.Held() {
			t.Fatalf("%s after healing: %+v %v", name, info, err)
		}
	}
	members, _, err := cl.Members(timeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Leader && m.ID == lead.id {
			t.Fatalf("the old leader %s leads again right after healing; the majority's leader should keep it", m.ID)
		}
	}
	t.Logf("holder in the minority (token %d) lost its lease and was stopped; majority granted token %d; renewed lease kept", holderToken, l.Token())
}
