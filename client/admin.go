package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/fencing"
)

// LockInfo describes a lock as the server sees it. HolderLease through
// LockDelay describe its first grant (by slot; a held one before one in
// lock-delay): a mutex's one grant; Grants lists them all.
type LockInfo struct {
	Name        string
	HolderLease uint64 // public lease number; 0 when free
	HolderOwner string
	Token       uint64        // current (or, while delayed, last) grant's token
	TTLLeft     time.Duration // until the holder's lease expires unless renewed
	Waiters     int
	Delayed     bool // free but in lock-delay after its holder's lease expired
	LockDelay   time.Duration
	// DelayLeft, while Delayed, is how long until the lock goes to its first
	// waiter, on the leader's clock.
	DelayLeft time.Duration
	// Queue is who waits, in FIFO order (the first is granted next). Status
	// fills it; List leaves it nil (Waiters counts them).
	Queue []Waiter
	// Index is the raft index of the state this was read from (Status, List): a
	// Watch from Index+1 misses no later change.
	Index uint64
	// Permits is 1 for a mutex or a read-write lock, N for a semaphore (0
	// from a server older than semaphores).
	Permits int
	// Grants are every grant held or in lock-delay, by slot then token.
	Grants []GrantInfo
	// SharedWaiters is how many of the Waiters want a reader's grant.
	SharedWaiters int
	// HeldFor is how long the first grant has been held, on the log's
	// clock; 0 while delayed or when the member that answered does not know
	// (the grant is older than the snapshot it restored).
	HeldFor time.Duration
}

// GrantInfo is one grant of a lock: a permit of a semaphore, a reader's or
// a writer's grant of a read-write lock, or a mutex's one grant.
type GrantInfo struct {
	HolderLease uint64 // 0 while in lock-delay
	HolderOwner string
	Token       uint64
	Slot        int
	Shared      bool
	Delayed     bool
	TTLLeft     time.Duration
	LockDelay   time.Duration
	DelayLeft   time.Duration // while Delayed: until its lock-delay ends, on the leader's clock
	HeldFor     time.Duration // as LockInfo.HeldFor, for this grant
}

// Waiter is one lease in a lock's queue. A caller finds its own place by
// the lease number WithWaiting reported.
type Waiter struct {
	Lease  uint64 // the waiting lease's public number
	Owner  string
	Shared bool // it waits for a reader's grant of a read-write lock
}

// Held reports whether someone holds the lock.
func (i LockInfo) Held() bool { return i.HolderLease != 0 }

func lockInfo(l *api.LockInfo) LockInfo {
	info := LockInfo{Name: l.GetName(), HolderLease: l.GetHolderLeaseNumber(), HolderOwner: l.GetHolderOwner(), Token: l.GetToken(),
		TTLLeft: l.GetTtlLeft().AsDuration(), Waiters: int(l.GetWaiters()), Delayed: l.GetDelayed(), LockDelay: l.GetLockDelay().AsDuration(),
		DelayLeft: l.GetDelayLeft().AsDuration(), Permits: int(l.GetPermits()), SharedWaiters: int(l.GetSharedWaiters()),
		HeldFor: l.GetHeldFor().AsDuration()}
	for _, g := range l.GetGrants() {
		info.Grants = append(info.Grants, GrantInfo{HolderLease: g.GetLeaseNumber(), HolderOwner: g.GetOwner(), Token: g.GetToken(),
			Slot: int(g.GetSlot()), Shared: g.GetShared(), Delayed: g.GetDelayed(), TTLLeft: g.GetTtlLeft().AsDuration(),
			LockDelay: g.GetLockDelay().AsDuration(), DelayLeft: g.GetDelayLeft().AsDuration(), HeldFor: g.GetHeldFor().AsDuration()})
	}
	return info
}

// Status returns one lock's state (a free lock has no holder).
func (c *Client) Status(ctx context.Context, name string) (LockInfo, error) {
	var resp *api.GetLockResponse
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = c.leader().GetLock(ctx, &api.GetLockRequest{Name: name})
		return err
	})
	if err != nil {
		return LockInfo{}, fmt.Errorf("fence: status of %q: %w", name, err)
	}
	info := lockInfo(resp.GetLock())
	info.Index = resp.GetIndex()
	for _, w := range resp.GetQueue() {
		info.Queue = append(info.Queue, Waiter{Lease: w.GetLeaseNumber(), Owner: w.GetOwner(), Shared: w.GetShared()})
	}
	return info, nil
}

// List returns every lock that is held, delayed or waited for, by name. It
// reads page by page; a lock that changes meanwhile is listed as each page
// saw it.
func (c *Client) List(ctx context.Context) ([]LockInfo, error) {
	locks, _, err := c.ListWithIndex(ctx)
	return locks, err
}

// ListWithIndex is List that also returns the raft index of the state its
// first page was read from: a Watch (WatchPrefix "") from index+1 misses no
// change after the list (it may report some that later pages already show).
func (c *Client) ListWithIndex(ctx context.Context) (locks []LockInfo, index uint64, err error) {
	var out []LockInfo
	for after := ""; ; {
		var resp *api.ListLocksResponse
		err := c.retry(ctx, func(ctx context.Context) (err error) {
			resp, err = c.leader().ListLocks(ctx, &api.ListLocksRequest{After: after})
			return err
		})
		if err != nil {
			return nil, 0, fmt.Errorf("fence: list locks: %w", err)
		}
		if after == "" {
			index = resp.GetIndex()
		}
		for _, l := range resp.GetLocks() {
			info := lockInfo(l)
			info.Index = resp.GetIndex()
			out = append(out, info)
		}
		if !resp.GetMore() || len(resp.GetLocks()) == 0 {
			return out, index, nil
		}
		after = resp.GetLocks()[len(resp.GetLocks())-1].GetName()
	}
}

// ForceRelease is for operators: it ends the current grant of name (and only
// that lock: the holder's lease and its other locks live on) and hands the
// lock to the next waiter. The holder learns at its next renewal: that
// Lease's Done closes with ErrRevoked. The grant is named by its token, read
// first, so a retried or late call never ends a later holder's grant; a lock
// that is not held is an error matching ErrNotHeld. The server logs reason.
// A lock with several grants (a semaphore's permits, readers) is refused
// (ErrInvalid): name the grant with ForceReleaseGrant.
func (c *Client) ForceRelease(ctx context.Context, name, reason string) (revoked LockInfo, released []string, err error) {
	info, err := c.Status(ctx, name)
	if err != nil {
		return LockInfo{}, nil, err
	}
	if !info.Held() {
		return LockInfo{}, nil, fmt.Errorf("%w: lock %q is not held; nothing to release", ErrNotHeld, name)
	}
	if len(info.Grants) > 1 {
		var tokens []string
		for _, g := range info.Grants {
			tokens = append(tokens, fmt.Sprint(g.Token))
		}
		return LockInfo{}, nil, fmt.Errorf("%w: lock %q has %d grants (tokens %s); name the one to end by its token", ErrInvalid, name,
			len(info.Grants), strings.Join(tokens, ", "))
	}
	return c.ForceReleaseGrant(ctx, name, info.Token, reason)
}

// ForceReleaseGrant is ForceRelease of the grant of name with token: one
// permit of a semaphore, one reader's grant (LockInfo.Grants lists them).
// A grant that has ended (or never was) is an error matching ErrNotHeld.
func (c *Client) ForceReleaseGrant(ctx context.Context, name string, token uint64, reason string) (revoked LockInfo, released []string, err error) {
	info := LockInfo{Token: token}
	req := &api.ForceReleaseRequest{RequestId: newRequestID(), Name: name, Token: token, Reason: reason}
	var resp *api.ForceReleaseResponse
	err = c.admin(ctx, fmt.Sprintf("force-release %q", name), func(ctx context.Context) (err error) {
		resp, err = c.leader().ForceRelease(ctx, req)
		return err
	})
	if status.Code(err) == codes.FailedPrecondition {
		return LockInfo{}, nil, fmt.Errorf("%w: the grant of %q with token %d ended meanwhile (%v)", ErrNotHeld, name, info.Token, status.Convert(err).Message())
	}
	if err != nil {
		return LockInfo{}, nil, err
	}
	return LockInfo{Name: name, HolderLease: resp.GetRevokedLeaseNumber(), HolderOwner: resp.GetRevokedOwner(), Token: info.Token}, resp.GetReleased(), nil
}

// Detached is a lock held under a lease of its own that nobody renews: it
// ends after TTL unless released first with UnlockDetached. It suits holders
// that cannot stay alive to renew, such as shell scripts (fence lock /
// fence unlock); a process that can renew should use Lock.
type Detached struct {
	Name        string
	Token       uint64
	SignedToken string // as Lease.SignedToken
	LeaseNumber uint64
	TTL         time.Duration
	// Secret proves ownership (hex). Whoever has it can release the lock.
	Secret string
}

// LockDetached takes name under a new, unrenewed lease with the given TTL,
// waiting in the queue (until ctx ends) if wait is set.
func (c *Client) LockDetached(ctx context.Context, name string, ttl time.Duration, wait bool, opts ...Option) (*Detached, error) {
	o := c.opts
	o.apply(opts)
	req := newRequestID()
	var lease *api.CreateLeaseResponse
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		lease, err = c.leader().CreateLease(ctx, &api.CreateLeaseRequest{RequestId: req, Ttl: durationpb.New(ttl), Owner: o.owner})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fence: create lease: %w", err)
	}
	acq := acquireRequest(lease.LeaseSecret, 1, name, wait, &o) // the lease's only call
	if wait && o.waiting != nil {
		o.waiting(lease.LeaseNumber)
	}
	var resp *api.AcquireResponse
	err = c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = c.leader().Acquire(ctx, acq)
		return err
	})
	if err != nil {
		// Not granted, or not known to be: end the lease, which ends any grant
		// it got. Revoke is idempotent, so it is retried (across members, with
		// a fresh context) like any call; if even that fails, nothing renews
		// the lease and the server ends it after its TTL.
		revokeCtx, cancel := context.WithTimeout(context.Background(), defaultSettleFor)
		defer cancel()
		rev := &api.RevokeRequest{RequestId: newRequestID(), LeaseSecret: lease.LeaseSecret}
		rerr := c.retry(revokeCtx, func(ctx context.Context) error {
			_, err := c.leader().Revoke(ctx, rev)
			return err
		})
		if rerr != nil && outcomeUnknown(err) {
			err = fmt.Errorf("%w (and revoking its lease failed: %v; it ends after its TTL, %v)", err, rerr, ttl)
		}
		if st, _ := status.FromError(err); st.Code() == codes.Aborted {
			return nil, lockedError(name, st)
		}
		return nil, fmt.Errorf("fence: lock %q: %w", name, err)
	}
	return &Detached{Name: name, Token: resp.Token, SignedToken: resp.SignedToken, LeaseNumber: lease.LeaseNumber, TTL: lease.GetTtl().AsDuration(),
		Secret: hex.EncodeToString(lease.LeaseSecret)}, nil
}

// UnlockDetached ends the detached lease with the given secret, releasing
// its lock, and returns the name released. If that released nothing, its
// error matches ErrNotHeld: the lease had ended already (an earlier unlock,
// or its TTL ran out) or its lock had been force-released; the server cannot
// tell which, since it forgets ended leases.
func (c *Client) UnlockDetached(ctx context.Context, secret string) (released []string, err error) {
	id, err := hex.DecodeString(secret)
	if err != nil || len(id) != 16 {
		return nil, fmt.Errorf("%w: %q is not a lease secret (32 hex digits, as printed by fence lock)", ErrInvalid, secret)
	}
	req := &api.RevokeRequest{RequestId: newRequestID(), LeaseSecret: id}
	var resp *api.RevokeResponse
	err = c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = c.leader().Revoke(ctx, req)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fence: unlock: %w", err)
	}
	// Revoke is idempotent: a lease that had ended releases nothing.
	if len(resp.GetReleased()) == 0 {
		return nil, fmt.Errorf("%w: the lease had already ended (unlocked before, or its TTL ran out), or its lock was force-released", ErrNotHeld)
	}
	return resp.GetReleased(), nil
}

// Put writes value to the server's built-in fenced key-value store if token
// is at least the highest token key has accepted; otherwise it returns a
// *fencing.StaleError (errors.Is(err, fencing.ErrStale)): a newer holder has
// written, so stop. Write whole values. Retries cannot act twice in a way
// that matters: a repeated Put with the same token and value is idempotent.
// If an earlier attempt's outcome was unknown (its answer lost) and a retry
// is refused as stale, the first may have written before the newer holder
// did: the error then matches ErrIndeterminate as well as fencing.ErrStale.
func (c *Client) Put(ctx context.Context, key string, value []byte, token uint64) error {
	req := &api.PutRequest{RequestId: newRequestID(), Key: key, Value: value, Token: token}
	maybeWritten := false // an attempt's outcome was unknown
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.leader().Put(ctx, req)
		maybeWritten = maybeWritten || outcomeUnknown(err)
		return err
	})
	if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
		for _, d := range st.Details() {
			if s, ok := d.(*api.StaleToken); ok {
				stale := &fencing.StaleError{Resource: key, Offered: s.Offered, Highest: s.Highest}
				if maybeWritten {
					return fmt.Errorf("%w: an earlier attempt of this put may have been written before the newer one: %w", ErrIndeterminate, stale)
				}
				return stale
			}
		}
	}
	if err != nil {
		return fmt.Errorf("fence: put %q: %w", key, err)
	}
	return nil
}

// Get reads key from the built-in fenced key-value store, with the highest
// token it has accepted. A key never written gives an error with code NOT_FOUND.
func (c *Client) Get(ctx context.Context, key string) (value []byte, token uint64, err error) {
	var resp *api.GetResponse
	err = c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = c.leader().Get(ctx, &api.GetRequest{Key: key})
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("fence: get %q: %w", key, err)
	}
	return resp.Value, resp.Token, nil
}

// Member is one node of the raft group.
type Member struct {
	ID       string
	RaftAddr string
	GRPCAddr string // where clients call it; empty until it has announced it
	Leader   bool
	Suffrage string // "Voter", or "Learner" while a new member catches up
	// As the answering member (the leader, for Members) sees it: Match is
	// the highest index known in the member's log, Lag the entries it is
	// behind the commit index (0 for the leader itself), Active that the
	// leader heard from it within an election timeout, LastContact how long
	// ago the answering member last heard from it (0 for itself, -1 never).
	Match, Lag  uint64
	Active      bool
	LastContact time.Duration
}

// Members lists the raft group as the member answering sees it, and names that member.
func (c *Client) Members(ctx context.Context) (members []Member, answeredBy string, err error) {
	var resp *api.MembersResponse
	err = c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = c.leader().Members(ctx, &api.MembersRequest{})
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("fence: members: %w", err)
	}
	for _, m := range resp.Members {
		contact := time.Duration(-1)
		if ms := m.GetLastContactMs(); ms >= 0 {
			contact = time.Duration(ms) * time.Millisecond
		}
		suffrage := "Voter"
		if m.GetSuffrage() == api.Suffrage_SUFFRAGE_LEARNER {
			suffrage = "Learner"
		}
		members = append(members, Member{ID: m.Id, RaftAddr: m.RaftAddr, GRPCAddr: m.GetGrpcAddr(), Leader: m.GetRole() == api.Role_ROLE_LEADER, Suffrage: suffrage,
			Match: m.GetMatchIndex(), Lag: m.GetLag(), Active: m.GetActive(), LastContact: contact})
	}
	return members, resp.AnsweredBy, nil
}

// AddMember adds a voter with the given id and raft address.
func (c *Client) AddMember(ctx context.Context, id, raftAddr string) error {
	return c.admin(ctx, "add member", func(ctx context.Context) error {
		_, err := c.leader().AddMember(ctx, &api.AddMemberRequest{Id: id, RaftAddr: raftAddr})
		return err
	})
}

// RemoveMember removes the member with the given id.
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	return c.admin(ctx, "remove member", func(ctx context.Context) error {
		_, err := c.leader().RemoveMember(ctx, &api.RemoveMemberRequest{Id: id})
		return err
	})
}

// TransferLeader hands leadership to the member id (any up-to-date voter
// when id is empty) and returns the new leader's id.
func (c *Client) TransferLeader(ctx context.Context, id string) (string, error) {
	var leader string
	err := c.admin(ctx, "transfer leadership", func(ctx context.Context) error {
		resp, err := c.leader().TransferLeader(ctx, &api.TransferLeaderRequest{Id: id})
		leader = resp.GetLeader()
		return err
	})
	return leader, err
}

// admin runs an admin call with the admin token attached.
func (c *Client) admin(ctx context.Context, what string, call func(context.Context) error) error {
	if c.opts.adminToken != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.opts.adminToken)
	}
	if err := c.retry(ctx, call); err != nil {
		return fmt.Errorf("fence: %s: %w", what, err)
	}
	return nil
}

// Backup is a consistent copy of the cluster's state as its leader took it
// (fence snapshot save writes one to a file; fence snapshot restore seeds a
// new cluster with it). State holds every lease's secret: keep it as
// private as the servers' data dirs.
type Backup struct {
	ClusterID uint64
	// NodeID is the leader that took it; State is the state after applying
	// log entry Index (the leader was in raft term Term then).
	NodeID      string
	Index, Term uint64
	TakenAt     time.Time
	// Token is the last fencing token granted in State.
	Token         uint64
	Leases, Locks uint64
	// Version is the fence that took it.
	Version string
	// State is the state in fence's snapshot encoding, checked against the
	// leader's size and SHA-256.
	State []byte
}

// Backup asks the leader for a consistent copy of the state (an admin
// call: it needs the admin token, or under a policy the admin right).
func (c *Client) Backup(ctx context.Context) (Backup, error) {
	var b Backup
	err := c.admin(ctx, "backup", func(ctx context.Context) error {
		stream, err := c.leader().Backup(ctx, &api.BackupRequest{})
		if err != nil {
			return err
		}
		first, err := stream.Recv()
		if err != nil {
			return err
		}
		h := first.GetHeader()
		if h == nil {
			return errors.New("the leader's answer has no header")
		}
		b = Backup{ClusterID: h.GetClusterId(), NodeID: h.GetNodeId(), Index: h.GetIndex(), Term: h.GetTerm(),
			TakenAt: h.GetTakenAt().AsTime(), Token: h.GetToken(), Leases: h.GetLeases(), Locks: h.GetLocks(),
			Version: h.GetVersion(), State: make([]byte, 0, min(h.GetSize(), 64<<20))} // grown as it arrives beyond that: the header alone does not get a large allocation
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if uint64(len(b.State)+len(chunk.GetData())) > h.GetSize() {
				return fmt.Errorf("the leader sent more than the %d bytes its header announced", h.GetSize())
			}
			b.State = append(b.State, chunk.GetData()...)
		}
		if sum := sha256.Sum256(b.State); uint64(len(b.State)) != h.GetSize() || !bytes.Equal(sum[:], h.GetSha256()) {
			return fmt.Errorf("the state received (%d bytes) is not the one the leader announced (%d bytes, its SHA-256)", len(b.State), h.GetSize())
		}
		return nil
	})
	return b, err
}

// HotLock is one of the busiest locks lately, as HotLocks reports it. The
// counts decay with the log's clock (an event t ago counts exp(−t/Window)),
// so each is about the events of the last Window, and fractional.
type HotLock struct {
	Name string
	// Score is Grants + Waits: how hot the lock is. It may overstate them
	// by up to ScoreError (the lock took the place of another in the
	// server's bounded sketch and inherited its score).
	Score, ScoreError float64
	// Grants counts grants; Waits acquires that joined the queue;
	// WaitSeconds the time waited by those granted after a wait;
	// Expirations the grants ended because their holder's lease expired.
	Grants, Waits, WaitSeconds, Expirations float64
	// Waiters is how many wait for the lock now.
	Waiters int
}

// HotLocks returns up to n of the busiest locks lately (n 0: the server's
// default, 20; at most 1000), hottest first, whose names start with prefix
// ("" for all), and the window their counts decay over. The leader
// answers from its own bounded sketch of the lock names (the top few
// thousand, whatever the number of names; see README, Operations); under a
// policy, only names the caller may read.
func (c *Client) HotLocks(ctx context.Context, n int, prefix string) (locks []HotLock, window time.Duration, err error) {
	if n < 0 || n > math.MaxUint32 {
		return nil, 0, fmt.Errorf("%w: hot locks: n %d is negative or too large", ErrInvalid, n)
	}
	var resp *api.HotLocksResponse
	err = c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = c.leader().HotLocks(ctx, &api.HotLocksRequest{Limit: uint32(n), Prefix: prefix})
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("fence: hot locks: %w", err)
	}
	for _, l := range resp.GetLocks() {
		locks = append(locks, HotLock{Name: l.GetName(), Score: l.GetScore(), ScoreError: l.GetScoreError(), Grants: l.GetGrants(),
			Waits: l.GetWaits(), WaitSeconds: l.GetWaitSeconds(), Expirations: l.GetExpirations(), Waiters: int(l.GetWaiters())})
	}
	return locks, resp.GetWindow().AsDuration(), nil
}
