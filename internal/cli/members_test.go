package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/locktest"
)

// members ls shows every member's health as the leader sees it: all ok with
// no lag in a healthy cluster; a member cut off from the others becomes
// unreachable and falls behind while the others commit.
func TestMembersLsHealth(t *testing.T) {
	c := locktest.NewCluster(t, 3)
	addrs := strings.Join(c.Addrs(), ",")
	ls := func() []memberJSON {
		t.Helper()
		code, out, errOut := fence(t, addrs, "members", "ls", "--json")
		if code != 0 {
			t.Fatalf("members ls --json: %d %s", code, errOut)
		}
		var ms []memberJSON
		if err := json.Unmarshal([]byte(out), &ms); err != nil {
			t.Fatalf("members ls --json: %v\n%s", err, out)
		}
		return ms
	}
	waitFor := func(what string, ok func([]memberJSON) bool) []memberJSON {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ms := ls()
			if ok(ms) {
				return ms
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s: %+v", what, ms)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	healthy := waitFor("every member healthy and caught up", func(ms []memberJSON) bool {
		for _, m := range ms {
			if !m.Healthy || m.Lag != 0 || m.LastContactSecs < 0 || m.LastContactSecs > 2 {
				return false
			}
		}
		return len(ms) == 3
	})
	leader := ""
	for _, m := range healthy {
		if m.Role == "leader" {
			leader = m.ID
		}
	}
	var cut *locktest.Node
	for _, nd := range c.Nodes {
		if nd.ID != leader {
			cut = nd
		}
	}
	c.Partition(cut)
	for i := 0; i < 5; i++ { // the others commit while cut is away
		if code, _, errOut := fence(t, addrs, "lock", "members/"+string(rune('a'+i)), "--ttl", "1m"); code != 0 {
			t.Fatalf("lock while %s is cut off: %d %s", cut.ID, code, errOut)
		}
	}
	waitFor(cut.ID+" unreachable and behind", func(ms []memberJSON) bool {
		for _, m := range ms {
			if m.ID == cut.ID {
				return !m.Healthy && m.Lag > 0 && m.LastContactSecs > 0
			}
		}
		return false
	})
	if code, out, _ := fence(t, addrs, "members", "ls"); code != 0 || !strings.Contains(out, "unreachable") || !strings.Contains(out, "LAG") {
		t.Fatalf("members ls: %d\n%s", code, out)
	}
	c.Heal()
	waitFor(cut.ID+" back", func(ms []memberJSON) bool {
		for _, m := range ms {
			if m.ID == cut.ID {
				return m.Healthy && m.Lag == 0
			}
		}
		return false
	})
}
