package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencehq/fence/internal/bench"
)

// Redis is one redis-server of our own (not the machine's), with no
// replication: the speed ceiling of a lock that promises nothing across
// failures. With Fsync, every write is in the append-only file before the
// reply (appendfsync always).
type Redis struct {
	Addr  string
	TTL   time.Duration
	Fsync bool
	proc  *Proc
}

// StartRedis starts redis-server on port with its files in dir.
func StartRedis(dir string, port int, ttl time.Duration, fsync bool) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: %w", err)
	}
	args := []string{bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--dir", dir}
	if fsync {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	p, err := StartProc("redis", args, dir+"/redis.log")
	if err != nil {
		return nil, err
	}
	r := &Redis{Addr: fmt.Sprintf("127.0.0.1:%d", port), TTL: ttl, Fsync: fsync, proc: p}
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return r, nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, errors.New("redis-server did not answer within 20s")
		}
	}
}

// Stop ends redis-server.
func (r *Redis) Stop() { r.proc.Stop() }

// Name returns "redis" or "redis-fsync".
func (r *Redis) Name() string {
	if r.Fsync {
		return "redis-fsync"
	}
	return "redis"
}

// release deletes the key only if it still holds our token.
var release = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// Locker gives worker w its own connection. Lock is SET NX PX, retried
// with a short backoff while held (Redis has no queue); release is a
// compare-and-delete script.
func (r *Redis) Locker(context.Context, int) (bench.Locker, error) {
	return &redisLocker{c: redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 1}), ttl: r.TTL}, nil
}

type redisLocker struct {
	c   *redis.Client
	ttl time.Duration
}

func (l *redisLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	b := make([]byte, 16)
	rand.Read(b)
	token, key := hex.EncodeToString(b), "peerbench:"+name
	backoff := 100 * time.Microsecond
	for {
		ok, err := l.c.SetNX(ctx, key, token, l.ttl).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func(ctx context.Context) error { return release.Run(ctx, l.c, []string{key}, token).Err() }, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Millisecond)
	}
}

func (l *redisLocker) Close() error { return l.c.Close() }

// Renewer is not measured for Redis (the issue compares renewals with etcd).
func (r *Redis) Renewer(context.Context, int) (bench.Renewer, error) {
	return nil, fmt.Errorf("redis: renewals: %w", bench.ErrUnsupported)
}
