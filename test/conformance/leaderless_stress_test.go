package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// TestStressLeaderKill kills the leader of 3 real processes again and again
// (as killLeader does, with a lock held and renewing) and records how long
// the cluster goes without a ready leader. CI skips it: set
// FENCE_STRESS_LEADERLESS=1 (FENCE_STRESS_KILLS: how many kills, default
// 50; FENCE_STRESS_MINUTES: a cap on the time, default 20).
func TestStressLeaderKill(t *testing.T) {
	if os.Getenv("FENCE_STRESS_LEADERLESS") == "" {
		t.Skip("set FENCE_STRESS_LEADERLESS=1 to run")
	}
	kills := envInt("FENCE_STRESS_KILLS", 50)
	limit := time.Duration(envInt("FENCE_STRESS_MINUTES", 20)) * time.Minute
	start := time.Now()

	c := newMembers(t, 3, "--log-level", "debug", "--raft-log-level", "debug")
	for _, m := range c.members {
		if bin := os.Getenv("FENCE_STRESS_BINARY"); bin != "" {
			m.startBinary(t, bin)
		} else {
			m.start(t)
		}
	}
	if _, d := c.waitLeader(60 * time.Second); d < 0 {
		t.Fatal("no first leader")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := client.Dial(ctx, c.addrs(), client.WithInsecure(), client.WithTTL(3*time.Second), client.WithOwner("stress"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
	if _, err := cl.Lock(lctx, "stress-holding"); err != nil {
		t.Logf("lock: %v (going on without it)", err)
	}
	lcancel()

	var before, after []time.Duration
	for i := 0; i < kills && time.Since(start) < limit; i++ {
		old, d := c.waitLeader(30 * time.Second)
		before = append(before, d)
		if d < 0 || d > 5*time.Second {
			c.report(t, i, "before the kill", d)
			if d < 0 {
				break
			}
		}
		if os.Getenv("FENCE_STRESS_TRANSFER") != "" && rand.N(2) == 0 { // as the scenario before the kill does
			to := c.other(old)
			tctx, tcancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := old.api.TransferLeader(tctx, &api.TransferLeaderRequest{Id: to.id})
			tcancel()
			if err != nil {
				t.Logf("kill %d: transfer %s → %s: %v", i, old.id, to.id, err)
			}
			for until := time.Now().Add(5 * time.Second); time.Now().Before(until); { // raft aborts a transfer the transferee is too far behind for
				l, d := c.waitLeader(30 * time.Second)
				if d < 0 {
					c.report(t, i, "after a transfer", d)
					return
				}
				if l != old {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Duration(rand.N(3000)) * time.Millisecond)
			if old, d = c.waitLeader(30 * time.Second); d < 0 {
				c.report(t, i, "after a transfer", d)
				return
			}
		}
		at := time.Now()
		old.kill()
		t.Logf("kill %d: %s at %s", i, old.id, at.Format("15:04:05.000"))
		nu, d := c.waitLeader(30 * time.Second)
		after = append(after, d)
		if d < 0 || d > 5*time.Second {
			c.report(t, i, "after the kill of "+old.id, d)
			if d < 0 {
				break
			}
		} else {
			t.Logf("kill %d: %s leads after %v", i, nu.id, d)
		}
		if bin := os.Getenv("FENCE_STRESS_BINARY"); bin != "" {
			old.startBinary(t, bin)
		} else {
			old.start(t)
		}
		time.Sleep(time.Duration(rand.N(6000)) * time.Millisecond)
	}
	t.Logf("leader before a kill (n=%d): %s", len(before), summary(before))
	t.Logf("leader after a kill (n=%d): %s", len(after), summary(after))
}

// waitLeader waits for a member whose /leaderz answers 200; d < 0: none
// within limit.
func (c *cluster) waitLeader(limit time.Duration) (*member, time.Duration) {
	start := time.Now()
	for time.Since(start) < limit {
		for _, m := range c.members {
			if m.cmd == nil {
				continue
			}
			if _, ok := m.get("/leaderz"); ok {
				return m, time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, -1
}

func (c *cluster) report(t *testing.T, i int, when string, d time.Duration) {
	var states []string
	for _, m := range c.members {
		states = append(states, m.state())
	}
	t.Errorf("kill %d: %s: leader after %v (-1: none); the members:\n  %s", i, when, d, strings.Join(states, "\n  "))
	for _, m := range c.members {
		b, _ := os.ReadFile(filepath.Join(m.dir, "server.log"))
		dst := filepath.Join(os.TempDir(), fmt.Sprintf("leaderless-%d-%s.log", i, m.id))
		_ = os.WriteFile(dst, b, 0o644)
		t.Logf("%s: log saved at %s", m.id, dst)
	}
}

func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("min %v p50 %v p90 %v p99 %v max %v", s[0], q(0.5), q(0.9), q(0.99), s[len(s)-1])
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}
