// Package fencingredis keeps fenced values in Redis: a write carries its
// lock's fencing token, and Redis itself refuses it if the key has already
// accepted a higher one. The check and the write are one Lua script, so no
// pause can fall between them.
//
// # Basics
//
// A [Store] wraps a go-redis client (*redis.Client, *redis.ClusterClient,
// *redis.Ring). [Store.Set] writes a value with a token and succeeds iff the
// token is at least the key's fence (the highest token it has accepted), so
// one holder may write many times; otherwise nothing is written and the
// error is a *fencing.StaleError matching fencing.ErrStale: a newer holder
// has written, stop. [Store.Get] reads the value and its fence.
//
//	s := fencingredis.New(rdb, fencing.Limit{Max: 1 << 48})
//	err := s.Set(ctx, "totals:77", "42000", lease.Token())
//	if errors.Is(err, fencing.ErrStale) { /* stop: re-acquire, read fresh data */ }
//
// Where the fence lives: each fenced key is a Redis hash with two fields,
// "value" and "fence" (the token as a decimal string). One key holds both,
// so the script touches a single key and works unchanged on Redis Cluster
// (no hash tags needed). Read it with Get (or HGET key value); a plain GET
// or SET on it fails with WRONGTYPE, which keeps unfenced writers out.
// Tokens are compared as exact decimal integers (all of uint64), not as
// Lua's floating-point numbers, which lose precision above 2⁵³.
//
// The script is sent with EVALSHA, and with EVAL the first time a server
// does not have it cached yet (go-redis's Script).
//
// # Caveats
//
//   - The fence is only as durable as the Redis that holds it. If the key is
//     deleted, expires, or is lost (a restart without persistence, a
//     failover to a replica that had not yet received the last write: Redis
//     replicates asynchronously), the fence starts again from 0 and a stale
//     holder's write is accepted. Never set a TTL on a fenced key; run
//     Redis with persistence (appendonly yes, appendfsync always for every
//     write) if the data matters; with replicas, WAIT for them after Set,
//     and know that even that does not make a failover lose nothing.
//   - A stale write can still land before the newer holder's first write:
//     write whole values, never deltas.
//   - Never retry a refused write with the same token.
//   - A token nobody issued (1<<62, say) raises the fence past every real
//     token and locks the key out for good: pass a fencing.Limit to [New].
//   - This is the storage side only. The lock that hands out tokens must
//     be one whose tokens never repeat (fence's client); Redis's own
//     SET NX lock (package client/redislock) has no token at all.
package fencingredis
