package fencingredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fencehq/fence/fencing"
)

// Errors of package fencingredis (besides fencing's ErrStale and ErrTooHigh).
var (
	// ErrInvalid: the call was refused for a bad argument (an empty key);
	// nothing was sent to Redis.
	ErrInvalid = errors.New("fencingredis: invalid argument")
	// ErrNotFound: Get found no such key.
	ErrNotFound = errors.New("fencingredis: no such key")
)

// Client is what a Store needs of a go-redis client: *redis.Client,
// *redis.ClusterClient and *redis.Ring have it. Not a pipeline: its
// commands answer only when it is executed.
type Client interface {
	redis.Scripter
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
}

// The hash fields of a fenced key.
const (
	fieldValue = "value"
	fieldFence = "fence"
)

// setScript is the fenced write. KEYS[1] is the hash; ARGV[1] the token,
// ARGV[2] the value, ARGV[3] the Limit's MaxJump ("0": none), all tokens as
// decimal strings without leading zeros. It returns {outcome, fence before}.
// Tokens are compared and added as digit strings: Lua's numbers are doubles,
// which cannot tell 2⁵³ from 2⁵³+1.
var setScript = redis.NewScript(`
local function cmp(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      if x < y then return -1 end
      return 1
    end
  end
  return 0
end
local function add(a, b)
  local out, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then d = d + string.byte(a, i) - 48; i = i - 1 end
    if j > 0 then d = d + string.byte(b, j) - 48; j = j - 1 end
    table.insert(out, 1, string.char(48 + d % 10))
    carry = math.floor(d / 10)
  end
  return table.concat(out)
end
local token, fence = ARGV[1], redis.call('HGET', KEYS[1], 'fence') or '0'
if cmp(token, fence) >= 0 then
  if ARGV[3] ~= '0' and fence ~= '0' and cmp(token, add(fence, ARGV[3])) > 0 then
    return {'toohigh', fence}
  end
  redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', token)
  return {'ok', fence}
end
return {'stale', fence}
`)

// Store writes and reads fenced values in one Redis (or Redis Cluster). It
// is safe for concurrent use.
type Store struct {
	rdb   Client
	limit fencing.Limit
}

// New returns a Store on rdb that refuses tokens above limit (the zero
// Limit accepts every token; see fencing.Limit for why to set one).
func New(rdb Client, limit fencing.Limit) *Store { return &Store{rdb: rdb, limit: limit} }

// Set stores value under key if token is at least the key's fence (the
// highest token the key has accepted; 0 for a new key), and raises the fence
// to token, in one step. Otherwise nothing changes and the error is a
// *fencing.StaleError (errors.Is(err, fencing.ErrStale)) with the key's
// fence as Highest: a newer holder has written; stop. A token above the
// Store's Limit is refused with a *fencing.TooHighError. An empty key is an
// ErrInvalid. Other errors come from Redis (WRONGTYPE: the key exists and is
// not a fenced hash) or the connection; then the write may or may not have
// happened.
func (s *Store) Set(ctx context.Context, key, value string, token fencing.Token) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if err := s.limit.Check(key, 0, token); err != nil { // Max; MaxJump needs the fence: in the script
		return err
	}
	res, err := setScript.Run(ctx, s.rdb, []string{key},
		strconv.FormatUint(token, 10), value, strconv.FormatUint(s.limit.MaxJump, 10)).Slice()
	if err != nil {
		return fmt.Errorf("fencingredis: set %q: %w", key, err)
	}
	outcome, fence, err := parseReply(res)
	if err != nil {
		return fmt.Errorf("fencingredis: set %q: %w", key, err)
	}
	switch outcome {
	case "ok":
		return nil
	case "stale":
		return &fencing.StaleError{Resource: key, Offered: token, Highest: fence}
	case "toohigh":
		return &fencing.TooHighError{Resource: key, Offered: token, Ceiling: s.limit.Ceiling(fence)}
	}
	return fmt.Errorf("fencingredis: set %q: unexpected reply %q", key, outcome)
}

// parseReply reads the script's {outcome, fence}.
func parseReply(res []any) (string, fencing.Token, error) {
	if len(res) != 2 {
		return "", 0, fmt.Errorf("unexpected reply %v", res)
	}
	outcome, _ := res[0].(string)
	fence, err := parseFence(res[1])
	return outcome, fence, err
}

// parseFence reads a fence field: nil (none yet) is 0.
func parseFence(v any) (fencing.Token, error) {
	if v == nil {
		return 0, nil
	}
	s, _ := v.(string)
	f, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the key's fence %q is not a token", v)
	}
	return f, nil
}

// Get returns the value stored under key and its fence (the highest token
// it has accepted), or an error matching ErrNotFound if there is no such key.
// It is a read: it neither checks nor raises the fence, so it tells a holder
// nothing about whether its lock is still valid.
func (s *Store) Get(ctx context.Context, key string) (value string, fence fencing.Token, err error) {
	if key == "" {
		return "", 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	res, err := s.rdb.HMGet(ctx, key, fieldValue, fieldFence).Result()
	if err != nil {
		return "", 0, fmt.Errorf("fencingredis: get %q: %w", key, err)
	}
	if len(res) != 2 || res[0] == nil && res[1] == nil {
		return "", 0, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	value, _ = res[0].(string)
	if fence, err = parseFence(res[1]); err != nil {
		return "", 0, fmt.Errorf("fencingredis: get %q: %w", key, err)
	}
	return value, fence, nil
}
