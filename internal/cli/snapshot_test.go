package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/backup"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

// lastToken is the largest fence_last_token the members' /metrics show.
func lastToken(t *testing.T, c *locktest.Cluster) uint64 {
	t.Helper()
	var top uint64
	for _, nd := range c.Nodes {
		resp, err := http.Get("http://" + nd.Server.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "fence_last_token "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				top = max(top, uint64(f))
			}
		}
	}
	return top
}

// TestBackupRestoreNeverRepeatsAToken is the operations issue's case: a
// 3-node cluster grants under load; `fence snapshot save` runs in the
// middle of it; the load goes on, so the old cluster hands out many tokens
// after the backup, then stops. A restore without a floor is refused; with
// the floor the old members' fence_last_token shows (or a gap), the
// restored node's first grant has a token above every token the old
// cluster ever handed out, and the backup's state came along (a lock held
// across it keeps its holder and token).
func TestBackupRestoreNeverRepeatsAToken(t *testing.T) {
	old := locktest.NewCluster(t, 3, func(cfg *server.Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	addrs := strings.Join(old.Addrs(), ",")
	ctx := context.Background()
	c, err := client.Dial(ctx, old.Addrs(), client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kept, err := c.Lock(ctx, "kept", client.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	var granted atomic.Uint64 // the largest token the old cluster handed out
	var grants atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, err := c.Lock(ctx, fmt.Sprintf("load/%d/%d", w, i%8), client.WithTTL(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				for g := granted.Load(); l.Token() > g && !granted.CompareAndSwap(g, l.Token()); g = granted.Load() {
				}
				grants.Add(1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for grants.Load() < 50 {
		time.Sleep(time.Millisecond)
	}
	file := filepath.Join(t.TempDir(), "fence.backup")
	code, out, errOut := fence(t, addrs, "snapshot", "save", file)
	if code != 0 {
		t.Fatalf("save under load: %d %s", code, errOut)
	}
	h, _, err := backup.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	atSave := grants.Load()
	for grants.Load() < atSave+200 { // the old cluster goes well past the backup
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if granted.Load() <= h.Token+100 {
		t.Fatalf("the old cluster got only to token %d after a backup at %d: the test proves nothing", granted.Load(), h.Token)
	}
	t.Logf("%s; backup at token %d, the old cluster went on to %d", strings.TrimSpace(out), h.Token, granted.Load())
	if code, out, errOut := fenceArgs(t, "snapshot", "status", file); code != 0 || !strings.Contains(out, "checksum") ||
		!strings.Contains(out, fmt.Sprintf("last token  %d", h.Token)) {
		t.Fatalf("status: %d\n%s%s", code, out, errOut)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	if code, _, errOut := fenceArgs(t, "snapshot", "restore", file, "--data-dir", dir); code != ExitUsage || !strings.Contains(errOut, "--token-floor") {
		t.Fatalf("restore without a floor: %d %s, want a usage error naming --token-floor", code, errOut)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("the refused restore made the data dir")
	}
	for name, floor := range map[string][]string{
		"from the old members' fence_last_token": {"--token-floor", strconv.FormatUint(lastToken(t, old), 10)},
		"from a gap":                             {"--token-gap", "1000000"},
	} {
		dir := filepath.Join(t.TempDir(), "restored")
		args := append([]string{"snapshot", "restore", file, "--data-dir", dir, "--node-id", "r1"}, floor...)
		if code, _, errOut := fenceArgs(t, args...); code != 0 {
			t.Fatalf("%s: restore: %d %s", name, code, errOut)
		}
		cfg := locktest.Config(dir)
		cfg.NodeID = "r1"
		srv, err := locktest.Run(cfg)
		if err != nil {
			t.Fatalf("%s: serve the restored dir: %v", name, err)
		}
		rc, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		l, err := rc.Lock(ctx, "load/0/0", client.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= granted.Load() {
			t.Errorf("%s: the restored cluster's first token is %d; the old one handed out up to %d", name, l.Token(), granted.Load())
		}
		info, err := rc.Status(ctx, "kept")
		if err != nil || info.Token != kept.Token() || !info.Held() {
			t.Errorf("%s: the lock held across the backup, restored: %+v %v (want token %d, held)", name, info, err, kept.Token())
		}
		if err := l.Release(ctx); err != nil { // (before the cluster has two voters, one of which is about to stop)
			t.Fatal(err)
		}
		// The restored cluster grows: a member joins (its log can only
		// start from a snapshot, which must list it) and becomes a voter.
		jcfg := locktest.Config(filepath.Join(t.TempDir(), "joiner"))
		jcfg.NodeID, jcfg.Join, jcfg.JoinTimeout = "r2", []string{srv.GRPCAddr()}, 10*time.Second
		joiner, err := server.New(jcfg) // (locktest.Run would wait for it to lead)
		if err != nil {
			t.Fatalf("%s: join the restored cluster: %v", name, err)
		}
		voter := false
		for deadline := time.Now().Add(15 * time.Second); !voter && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			ms, _, err := rc.Members(ctx)
			for _, m := range ms {
				voter = voter || err == nil && m.ID == "r2" && m.Suffrage == "Voter"
			}
		}
		if !voter {
			t.Errorf("%s: the member that joined the restored cluster never became a voter", name)
		}
		rc.Close() // first: it revokes its lease, which needs both voters
		joiner.Close()
		srv.Close()
	}
	var hdr map[string]any
	code, out, _ = fenceArgs(t, "snapshot", "status", file, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &hdr) != nil || hdr["token"] != float64(h.Token) {
		t.Fatalf("status --json: %d %s", code, out)
	}
}

// TestSnapshotStatusRefusesDamage: a backup with one byte changed, or cut
// short, is refused by status and restore (exit 1, "not an intact fence
// backup"), and restore writes nothing.
func TestSnapshotStatusRefusesDamage(t *testing.T) {
	addr := startServer(t)
	file := filepath.Join(t.TempDir(), "b")
	if code, _, errOut := fence(t, addr, "snapshot", "save", file); code != 0 {
		t.Fatalf("save: %d %s", code, errOut)
	}
	if code, _, errOut := fence(t, addr, "snapshot", "save", file); code != 1 || !strings.Contains(errOut, "exists") {
		t.Fatalf("save over an existing file: %d %s, want a refusal", code, errOut)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for name, damaged := range map[string][]byte{
		"a byte changed": append(append([]byte{}, b[:len(b)/2]...), append([]byte{b[len(b)/2] ^ 0x40}, b[len(b)/2+1:]...)...),
		"cut short":      b[:len(b)-1],
	} {
		bad := filepath.Join(t.TempDir(), "bad")
		if err := os.WriteFile(bad, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		if code, _, errOut := fenceArgs(t, "snapshot", "status", bad); code != 1 || !strings.Contains(errOut, "not an intact fence backup") {
			t.Errorf("%s: status: %d %s", name, code, errOut)
		}
		dir := filepath.Join(t.TempDir(), "d")
		if code, _, errOut := fenceArgs(t, "snapshot", "restore", bad, "--data-dir", dir, "--token-gap", "10"); code != 1 || !strings.Contains(errOut, "not an intact fence backup") {
			t.Errorf("%s: restore: %d %s", name, code, errOut)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s: the refused restore made the data dir", name)
		}
	}
}
