package peers

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestZKConfigGivesEachServerItsOwnPortsAndDirs(t *testing.T) {
	seen := map[int]bool{}
	for id := 1; id <= 3; id++ {
		cfg := zkConfig("/tmp/x", 17600, 3, id)
		lines := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(cfg), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("server %d: line %q is not key=value", id, line)
			}
			lines[k] = v
		}
		own := filepath.Join("/tmp/x", fmt.Sprintf("zk%d", id))
		client, quorum, election := zkPorts(17600, id)
		for k, want := range map[string]string{
			"dataDir": own + "/data", "dataLogDir": own + "/log", "forceSync": "yes",
			"clientPort": fmt.Sprint(client), "clientPortAddress": "127.0.0.1",
			"4lw.commands.whitelist": "srvr,ruok", "admin.enableServer": "false",
			fmt.Sprintf("server.%d", id): fmt.Sprintf("127.0.0.1:%d:%d", quorum, election),
		} {
			if lines[k] != want {
				t.Errorf("server %d: %s=%q, want %q", id, k, lines[k], want)
			}
		}
		for i := 1; i <= 3; i++ {
			if _, ok := lines[fmt.Sprintf("server.%d", i)]; !ok {
				t.Errorf("server %d's config does not list server.%d", id, i)
			}
		}
		for _, p := range []int{client, quorum, election} {
			if seen[p] {
				t.Errorf("port %d used twice", p)
			}
			seen[p] = true
		}
	}
}

func TestZKModeReadsSrvr(t *testing.T) {
	// Debian's 3.8.0 answers so (a leader adds a line of proposal sizes).
	srvr := "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\n" +
		"Latency min/avg/max: 0/21.6445/181\nReceived: 3802\nSent: 3786\nConnections: 1\nOutstanding: 0\n" +
		"Zxid: 0x100000187\nMode: %s\nNode count: 23\nProposal sizes last/min/max: 48/48/96\n"
	for _, mode := range []string{"leader", "follower", "standalone"} {
		if got := zkMode(fmt.Sprintf(srvr, mode)); got != mode {
			t.Errorf("zkMode of a %s's srvr = %q", mode, got)
		}
	}
	if got := zkMode("This ZooKeeper instance is not currently serving requests\n"); got != "" {
		t.Errorf("zkMode of a server that is electing = %q, want \"\"", got)
	}
	if got := zkMode(""); got != "" {
		t.Errorf("zkMode of no answer = %q, want \"\"", got)
	}
}

func TestZKLockPathIsOneLevelUnderPeerbench(t *testing.T) {
	for name, want := range map[string]string{
		"bench/contended": "/peerbench/bench_contended",
		"bench/x1/7":      "/peerbench/bench_x1_7",
		"a":               "/peerbench/a",
	} {
		if got := zkLockPath(name); got != want {
			t.Errorf("zkLockPath(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestZKWireFrames(t *testing.T) {
	req := zkConnectRequest(10 * time.Second)
	// length, protocolVersion, lastZxidSeen, timeOut, sessionId, passwd (len + 16), readOnly
	const body = 4 + 8 + 4 + 8 + 4 + 16 + 1
	if len(req) != 4+body || binary.BigEndian.Uint32(req) != body {
		t.Fatalf("connect request is %d bytes, says %d; want a %d-byte body", len(req), binary.BigEndian.Uint32(req), body)
	}
	if ms := binary.BigEndian.Uint32(req[4+12:]); ms != 10000 {
		t.Errorf("connect request asks for a %d ms session, want 10000", ms)
	}
	if want := []byte{0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11}; !bytes.Equal(zkPing, want) {
		t.Errorf("ping frame % x, want % x", zkPing, want)
	}

	resp := binary.BigEndian.AppendUint32(nil, 0)
	resp = binary.BigEndian.AppendUint32(resp, 6000)
	resp = binary.BigEndian.AppendUint64(resp, 0x1234)
	if d, id, err := zkSession(resp); err != nil || d != 6*time.Second || id != 0x1234 {
		t.Errorf("zkSession = %v, %#x, %v; want 6s, 0x1234", d, id, err)
	}
	refused := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 0), 0), 0)
	if _, _, err := zkSession(refused); err == nil {
		t.Error("zkSession accepted a refused session (timeout 0)")
	}
	if _, _, err := zkSession(resp[:10]); err == nil {
		t.Error("zkSession accepted a short response")
	}

	reply := binary.BigEndian.AppendUint32(nil, uint32(0xfffffffe))
	reply = binary.BigEndian.AppendUint64(reply, 42)
	reply = binary.BigEndian.AppendUint32(reply, uint32(0xfffffff9)) // -7: ZOPERATIONTIMEOUT
	if xid, zxid, code, err := zkReply(reply); err != nil || xid != zkPingXid || zxid != 42 || code != -7 {
		t.Errorf("zkReply = %d, %d, %d, %v; want -2, 42, -7", xid, zxid, code, err)
	}
	if _, _, _, err := zkReply(reply[:15]); err == nil {
		t.Error("zkReply accepted a short reply")
	}
}

// TestZooKeeperEnsemble starts a real ensemble (installing Debian's
// package if needed), takes and releases a lock, renews a session, kills
// the leader and takes a lock again. It runs only with FENCE_BENCH_ZK=1:
// it needs the package and ~20 s. (CI vets bench/ but runs none of its
// tests.)
func TestZooKeeperEnsemble(t *testing.T) {
	if os.Getenv("FENCE_BENCH_ZK") != "1" {
		t.Skip("set FENCE_BENCH_ZK=1 to start a ZooKeeper ensemble")
	}
	z, err := StartZooKeeper(t.TempDir(), 17700, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := fourLetterWord(ctx, z.Servers[0], "srvr")
	t.Logf("srvr: %q, %v", out, err)

	l, err := z.Locker(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	release, err := l.Lock(ctx, "test/a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := z.Locker(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := other.Lock(short, "test/a"); err == nil {
		t.Fatal("a second client took a held lock")
	}
	cancelShort()
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	release, err = other.Lock(ctx, "test/a")
	if err != nil {
		t.Fatalf("released lock not granted to the next client: %v", err)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}

	rn, err := z.Renewer(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := rn.Send(seq); err != nil {
			t.Fatal(err)
		}
	}
	for want := uint64(1); want <= 3; want++ {
		if seq, ok, err := rn.Recv(); err != nil || !ok || seq != want {
			t.Fatalf("ping answer = %d, %v, %v; want %d, true", seq, ok, err, want)
		}
	}
	rn.Close()

	victim, err := z.KillLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if z.Healthy(ctx) {
		t.Error("Healthy with the leader killed")
	}
	for attempt := 0; ; attempt++ {
		c, cancel := context.WithTimeout(ctx, time.Second)
		release, err = l.Lock(c, fmt.Sprintf("test/after/%d", attempt))
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no grant after the leader kill: %v", err)
		}
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := WaitHealthy(ctx, z, time.Minute); err != nil {
		t.Fatal(err)
	}
}
