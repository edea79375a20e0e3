package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencehq/fence/bench/peers"
	"github.com/fencehq/fence/internal/bench"
)

// failover kills the leader of sys kills times. Each time a client that
// connected before the kill asks for a fresh lock until it gets it; the
// figure is the time from the leader's death (SIGKILL, reaped) to that
// grant. The killed member is restarted and the cluster given time to heal
// before the next kill. Every wait is bounded.
func failover(ctx context.Context, sys system, kills int) ([]float64, error) {
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
		name := fmt.Sprintf("peerbench/failover/%d", i)
		if err := lockOnce(ctx, l, name+"/warm", 30*time.Second); err != nil {
			l.Close()
			return secs, fmt.Errorf("before kill %d: %w", i+1, err)
		}
		victim, err := c.KillLeader(ctx)
		if err != nil {
			l.Close()
			return secs, err
		}
		start := time.Now()
		err = lockOnce(ctx, l, name, 30*time.Second)
		took := time.Since(start)
		l.Close()
		if err != nil {
			return secs, fmt.Errorf("kill %d: no grant: %w", i+1, err)
		}
		secs = append(secs, took.Seconds())
		fmt.Printf("  %s failover %d: first grant %.3f s after the kill\n", sys.Name(), i+1, took.Seconds())
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

// lockOnce takes and releases name, retrying each attempt for up to 2 s,
// until limit.
func lockOnce(ctx context.Context, l bench.Locker, name string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		release, err := l.Lock(c, name)
		cancel()
		if err == nil {
			return release(ctx)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
	}
}
