package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencehq/fence/internal/hold"
)

// Client is what a Locker needs of a go-redis client: *redis.Client,
// *redis.ClusterClient and *redis.Ring have it (on a Cluster each lock is
// one key, in one slot). Not a pipeline: its commands answer only when it
// is executed.
type Client interface {
	redis.Scripter
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
}

// renewScript is compare-and-PEXPIRE: KEYS[1] the lock, ARGV[1] the
// holder's value, ARGV[2] the TTL in ms. 1 if renewed, 0 if not ours.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript is compare-and-delete: KEYS[1] the lock, ARGV[1] the
// holder's value. 1 if deleted, 0 if not ours.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Locker takes efficiency-only locks in one Redis (see the package doc for
// what they do not protect). It is safe for concurrent use and holds no
// resources of its own: closing the Redis client is the caller's.
type Locker struct {
	rdb  Client
	opts options
}

// New returns a Locker on rdb; opts are the defaults for its locks.
func New(rdb Client, opts ...Option) *Locker {
	o := defaults()
	o.apply(opts)
	return &Locker{rdb: rdb, opts: o}
}

// TryLock takes the lock if the key is free (SET NX PX) and returns at once
// otherwise, with an error matching ErrLocked. If Redis fails to answer, it
// returns that error, after deleting the key if the SET did take it (best
// effort; else the key expires within the TTL).
func (k *Locker) TryLock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return k.acquire(ctx, name, false, opts)
}

// Lock waits until the key is free and takes it, or until ctx ends. It polls
// (Redis has no queue), so it is not fair: see WithPoll. An error from Redis
// ends the wait, as in TryLock.
func (k *Locker) Lock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return k.acquire(ctx, name, true, opts)
}

func (k *Locker) acquire(ctx context.Context, name string, wait bool, opts []Option) (*Lease, error) {
	o := k.opts
	o.apply(opts)
	margin, err := o.check(name)
	if err != nil {
		return nil, err
	}
	value := newValue()
	backoff := hold.NewBackoff(o.pollMax)
	for {
		sent := o.clock.Now()
		ok, err := k.rdb.SetNX(ctx, name, value, o.ttl).Result()
		if err != nil {
			// The SET may have happened: take back what is ours, if it is.
			k.giveBack(name, value)
			return nil, fmt.Errorf("redislock: lock %q: %w", name, err)
		}
		if ok {
			return newLease(k.rdb, o, name, value, margin, sent), nil
		}
		if !wait {
			return nil, fmt.Errorf("%w: %q", ErrLocked, name)
		}
		if err := backoff.Wait(ctx); err != nil {
			return nil, fmt.Errorf("redislock: lock %q: %w", name, err)
		}
	}
}

// giveBack deletes name if it still holds value, best effort: if it cannot,
// the key expires within its TTL.
func (k *Locker) giveBack(name, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	releaseScript.Run(ctx, k.rdb, []string{name}, value)
}

// Do runs fn once while holding the lock: it waits for the lock (Lock),
// calls fn with a context that is cancelled the moment the lease can no
// longer be trusted (context.Cause says why), and releases the lock
// afterwards. If the lease ended while fn ran and fn failed, Do's error
// wraps both the lease's reason (errors.Is(err, ErrExpired)) and fn's error.
// fn may still run on for a while after another holder took the lock: make
// it harmless to run twice. If fn panics, Do releases the lock and panics
// on.
func (k *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	l, err := k.Lock(ctx, name, opts...)
	if err != nil {
		return err
	}
	return hold.Do(ctx, l, fmt.Sprintf("redislock: %q", name), fn)
}

// newValue returns a holder's secret: 128 random bits.
func newValue() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("redislock: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}
