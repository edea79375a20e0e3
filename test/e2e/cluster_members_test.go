package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// TestClusterJoinAndCatchUp: with snapshots every 50 entries, a follower is
// killed while 200 grants commit and then restarted, and a fourth node joins
// with --join. Leadership is moved to each of them in turn; serving as
// leader, each must hold every grant with its token (so each caught up, from
// the log or from a snapshot). Finally the fourth node is removed.
func TestClusterJoinAndCatchUp(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3, "--snapshot-threshold", "50", "--trailing-logs", "20", "--admin-token-file", tokenFile)
	cl := c.dial(client.WithTTL(time.Minute), client.WithAdminToken("s3cret"))
	if _, err := c.dial().TransferLeader(timeout(t, 5*time.Second), ""); err == nil || !strings.Contains(err.Error(), "send the admin token") {
		t.Fatalf("an admin call without the token: %v", err)
	}
	grants := map[string]uint64{}
	grab := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s/%d", prefix, i)
			l, err := cl.TryLock(timeout(t, 10*time.Second), name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			grants[name] = l.Token()
		}
	}
	grab("before", 100)
	lead := c.leader()
	var lagging *node
	for _, nd := range c.nodes {
		if nd != lead {
			lagging = nd
			break
		}
	}
	lagging.kill()
	grab("while-down", 200)
	lagging.startProcess()

	joiner := newNode(t, "--node-id", "n4", "--join", strings.Join(c.addrs(), ","), "--admin-token-file", tokenFile)
	joiner.id = "n4"
	joiner.startProcess()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Joined, and its client address recorded: Members names every
		// member's, so a client that knows one address finds them all.
		members, _, err := cl.Members(timeout(t, 5*time.Second))
		named := 0
		for _, m := range members {
			for _, nd := range append([]*node{joiner}, c.nodes...) {
				if m.ID == nd.id && m.GRPCAddr == nd.grpc {
					named++
				}
			}
		}
		if err == nil && len(members) == 4 && named == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n4 never joined, or a member's client address is missing: %+v %v", members, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	grab("after-join", 50)

	for _, nd := range []*node{lagging, joiner} {
		var got string
		var err error
		for deadline := time.Now().Add(20 * time.Second); got != nd.id; time.Sleep(100 * time.Millisecond) {
			got, err = cl.TransferLeader(timeout(t, 10*time.Second), nd.id)
			if time.Now().After(deadline) {
				t.Fatalf("could not move leadership to %s (leader: %s): %v", nd.id, got, err)
			}
		}
		held := heldTokens(t, cl)
		for name, tok := range grants {
			if held[name] != tok {
				t.Fatalf("%s as leader: %s has token %d, want %d (did not catch up)", nd.id, name, held[name], tok)
			}
		}
		t.Logf("%s leads and holds all %d grants", nd.id, len(grants))
	}

	if _, err := cl.TransferLeader(timeout(t, 10*time.Second), lead.id); err != nil {
		t.Logf("transfer back: %v", err)
	}
	if err := cl.RemoveMember(timeout(t, 10*time.Second), "n4"); err != nil {
		t.Fatal(err)
	}
	members, _, err := cl.Members(timeout(t, 10*time.Second))
	if err != nil || len(members) != 3 {
		t.Fatalf("after removing n4: %v %v", members, err)
	}
}
