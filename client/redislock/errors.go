package redislock

import "errors"

// Errors. Match them with errors.Is; the values returned wrap them with detail.
var (
	// ErrLocked: TryLock found the key taken (by another holder, or by
	// another Lease of this process: one holder per key).
	ErrLocked = errors.New("redislock: lock is held")
	// ErrExpired: the lease can no longer be trusted: no renewal succeeded
	// before the local deadline (the process was paused, or Redis was slow
	// or unreachable), or Redis no longer held this holder's value (ErrLost).
	// Stop the work; another holder may exist.
	ErrExpired = errors.New("redislock: lock expired")
	// ErrLost: a kind of ErrExpired: a renewal or Release found the key gone
	// or holding another holder's value (it expired in Redis, was deleted,
	// or was lost in a failover).
	ErrLost = errors.New("redislock: the key no longer holds this holder's value")
	// ErrReleased: the holder released the lock.
	ErrReleased = errors.New("redislock: lock released")
	// ErrInvalid: the call was refused for a bad argument (an empty name, a
	// TTL that is not a positive whole number of milliseconds, a safety
	// margin as long as the TTL); nothing was sent to Redis.
	ErrInvalid = errors.New("redislock: invalid argument")
)
