package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisAddr is the Redis of this machine (FENCE_TEST_REDIS_ADDR overrides it).
func RedisAddr() string { return env("FENCE_TEST_REDIS_ADDR", "127.0.0.1:6379") }

// redisStart starts the local Redis the way this machine's docs say: no
// persistence, loopback only.
var redisStart = []string{"redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379", "--save", "", "--appendonly", "no"}

var redisStarted sync.Once

// Redis connects to the local Redis (starting it if it is down) and closes
// the client when the test ends. Like Open, it skips the test if Redis
// cannot be reached, or fails it with FENCE_REQUIRE_DB=1.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	rdb, err := ConnectRedis(t.Logf)
	if err != nil {
		unreachable(t, err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// ConnectRedis connects to the local Redis, starting it if it is down (logf
// hears how that went), and waits up to 30s for it to answer PING.
func ConnectRedis(logf func(format string, args ...any)) (*redis.Client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr()})
	if err := pingRedis(rdb, 2*time.Second); err == nil {
		return rdb, nil
	}
	redisStarted.Do(func() {
		out, err := exec.Command(redisStart[0], redisStart[1:]...).CombinedOutput()
		logf("starting redis: %v %s", err, out)
	})
	if err := pingRedis(rdb, 30*time.Second); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis not reachable at %s: %v", RedisAddr(), err)
	}
	return rdb, nil
}

func pingRedis(rdb *redis.Client, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// RedisKey returns a fresh key name (the Redis is shared: other tests and
// programs use it too) and deletes that key when the test ends.
func RedisKey(t testing.TB, rdb *redis.Client) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	key := "fence_test:" + hex.EncodeToString(b)
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	return key
}

// RedisWithKey is Redis and RedisKey: the local Redis and a fresh key,
// deleted when the test ends.
func RedisWithKey(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := Redis(t)
	return rdb, RedisKey(t, rdb)
}
