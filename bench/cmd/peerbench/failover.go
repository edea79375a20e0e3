package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencehq/fence/bench/peers"
	"github.com/fencehq/fence/internal/bench"
)

// failover kills the leader of sys kills times. Each time a client that
// connected before the kill asks for locks until it gets one; the figure is
// the time from the leader's death (SIGKILL, reaped) to that grant. Each
// attempt is given attemptTimeout and a fresh name (an abandoned attempt
// cannot stand in the next one's way), so a call stuck on the dead member
// costs at most that much: the figures are exact to about attemptTimeout. The killed member is restarted and the cluster given time to heal
// before the next kill. Every wait is bounded.
func failover(ctx context.Context, name string, sys system, kills int) ([]float64, error) {
	c, ok := sys.(peers.Cluster)
	if !ok {
		return nil, bench.ErrUnsupported
	}
	var secs []float64
	for i := range kills {
		l, err := sys.Locker(ctx, 0)
		if err != nil {
			return secs, err
		}
		lock := fmt.Sprintf("peerbench/failover/%d", i)
		if _, err := lockOnce(ctx, l, lock+"/warm", time.Minute); err != nil {
			l.Close()
			return secs, fmt.Errorf("before kill %d: %w", i+1, err)
		}
		victim, err := c.KillLeader(ctx)
		if err != nil {
			l.Close()
			return secs, err
		}
		start := time.Now()
		granted, err := lockOnce(ctx, l, lock, time.Minute)
		took := granted.Sub(start)
		l.Close()
		if err != nil {
			return secs, fmt.Errorf("kill %d: no grant: %w", i+1, err)
		}
		secs = append(secs, took.Seconds())
		fmt.Printf("  %s failover %d: first grant %.3f s after the kill\n", name, i+1, took.Seconds())
		if err := victim.Restart(); err != nil {
			return secs, err
		}
		if err := peers.WaitHealthy(ctx, c, time.Minute); err != nil {
			return secs, err
		}
		time.Sleep(3 * time.Second) // the restarted member catches up; elections settle
	}
	return secs, nil
}

// attemptTimeout bounds one lock attempt during a failover.
const attemptTimeout = 100 * time.Millisecond

// lockOnce takes and releases a lock named name/attempt, retrying with a
// new attempt every attemptTimeout, until limit, and returns when the lock
// was granted.
func lockOnce(ctx context.Context, l bench.Locker, name string, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for attempt := 0; ; attempt++ {
		c, cancel := context.WithTimeout(ctx, attemptTimeout)
		release, err := l.Lock(c, fmt.Sprintf("%s/%d", name, attempt))
		cancel()
		if err == nil {
			granted := time.Now()
			rc, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return granted, release(rc)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Time{}, err
		}
	}
}
