package server

import (
	"context"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/policy"
)

// Limits of HotLocks.
const (
	defaultHotLimit = 20
	maxHotLimit     = 1000
	// maxHotLocks bounds --hot-locks: about 100 bytes per name tracked,
	// plus the name.
	maxHotLocks = 1_000_000
)

// HotLocks answers from this member's hot-lock sketch (node.HotLocks): no
// read through raft, the counts are this member's view of the log it has
// applied. Under a policy it keeps the names the caller may read, as
// ListLocks does, and a prefix filters further.
func (v *service) HotLocks(ctx context.Context, r *api.HotLocksRequest) (*api.HotLocksResponse, error) {
	limit, err := limitOf(r.GetLimit(), defaultHotLimit, maxHotLimit, "")
	if err != nil {
		return nil, err
	}
	prefix := r.GetPrefix()
	if prefix != "" {
		if err := name("prefix", prefix); err != nil {
			return nil, err
		}
	}
	keep := func(name string) bool { return strings.HasPrefix(name, prefix) }
	if pol, c := v.s.policy.Load(), callerOf(ctx); pol != nil && !c.admin {
		keep = func(name string) bool {
			return strings.HasPrefix(name, prefix) && pol.Allows(c.identity, policy.Read, name)
		}
	}
	locks, window, index := v.s.node.HotLocks(limit, keep)
	resp := &api.HotLocksResponse{Window: durationpb.New(window), Index: index}
	for _, l := range locks {
		resp.Locks = append(resp.Locks, &api.HotLock{Name: l.Name, Score: l.Score, ScoreError: l.Error, Grants: l.Grants,
			Waits: l.Waits, WaitSeconds: l.WaitSeconds, Expirations: l.Expirations, Waiters: uint32(l.Waiters)})
	}
	return resp, nil
}
