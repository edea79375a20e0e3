package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencehq/fence/client/redislock"
)

// Two workers start the same nightly report; only one runs it. (Runs
// against the Redis at 127.0.0.1:6379.) A rare double run must be harmless:
// this lock has no fencing token.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	const key = "fence_example:lock:report-job"
	rdb.Del(ctx, key)
	locks := redislock.New(rdb, redislock.WithTTL(10*time.Second))

	a, err := locks.TryLock(ctx, key)
	fmt.Println("worker A:", err)
	_, err = locks.TryLock(ctx, key)
	fmt.Println("worker B:", err, errors.Is(err, redislock.ErrLocked))

	fmt.Println("A releases:", a.Release(ctx), errors.Is(a.Err(), redislock.ErrReleased))
	err = locks.Do(ctx, key, func(ctx context.Context) error {
		fmt.Println("B runs the report")
		return nil
	})
	fmt.Println("B:", err)
	// Output:
	// worker A: <nil>
	// worker B: redislock: lock is held: "fence_example:lock:report-job" true
	// A releases: <nil> true
	// B runs the report
	// B: <nil>
}
