package server

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/planted"
	"github.com/fencehq/fence/internal/policy"
)

// service implements api.FenceServiceServer on top of a Server.
type service struct {
	api.UnimplementedFenceServiceServer
	s *Server
}

// leading refuses calls on a node that is not a ready leader.
func (v *service) leading() error {
	if !v.s.Ready() {
		return v.s.notLeader()
	}
	return nil
}

// apply validates nothing; it proposes cmd and maps outcomes to statuses.
// A command on a lease (Acquire, Release, Revoke) must come from the
// lease's own identity (under a policy).
func (v *service) apply(ctx context.Context, cmd fsm.Command, accept ...fsm.Code) (fsm.Result, error) {
	if err := v.leading(); err != nil {
		return fsm.Result{}, err
	}
	if cmd.Kind != fsm.KindCreateLease && !cmd.Lease.IsZero() {
		if err := v.ownLease(ctx, cmd.Lease); err != nil {
			return fsm.Result{}, err
		}
	}
	res, err := v.s.node.Propose(ctx, cmd)
	if err != nil {
		return res, proposeErr(err)
	}
	if res.Code == fsm.OK {
		return res, nil
	}
	for _, c := range accept {
		if res.Code == c {
			return res, nil
		}
	}
	return res, refusal(&cmd, &res)
}

func (v *service) CreateLease(ctx context.Context, r *api.CreateLeaseRequest) (*api.CreateLeaseResponse, error) {
	cmd, err := v.s.limits.createLease(r)
	if err != nil {
		return nil, err
	}
	cmd.Lease = newRandom()
	cmd.Identity = callerOf(ctx).identity // only this identity may use the lease
	res, err := v.apply(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return &api.CreateLeaseResponse{LeaseSecret: res.Lease[:], LeaseNumber: res.LeaseNumber, Ttl: durationpb.New(res.TTL)}, nil
}

// maxRenewalsInFlight bounds the renewals one KeepAlive stream has pending.
const maxRenewalsInFlight = 1024

// renewalRoundTimeout bounds how long a round of renewals may take to
// commit. A leader that cannot commit (deposed, or cut off from the
// majority) ends the stream with UNAVAILABLE after it, so a client moves to
// another member instead of waiting on a node that will never answer.
const renewalRoundTimeout = time.Second

// renewal is one KeepAlive request waiting for its answer.
type renewal struct {
	lease fsm.LeaseID
	seq   uint64
	bad   error // a malformed request, answered with ok=false and this error
}

// KeepAlive answers renewals in rounds: the requests that arrived while the
// previous round was committing are renewed together — one Renew per lease,
// proposed after every one of them arrived, so each is renewed no earlier
// than it asked — and answered in arrival order. A malformed request is
// answered on its own (ok=false, error) without ending the stream; when the
// client half-closes, every request already received is answered first.
//
// Two goroutines serve a stream: the intake reads and checks requests and
// queues them; the handler's own goroutine commits and answers the rounds.
// A failed round, or a refusal the intake meets (this node stopped
// leading), ends the stream at once (the handler returns), even while the
// client sends nothing more: it may be waiting for that very answer.
func (v *service) KeepAlive(stream api.FenceService_KeepAliveServer) error {
	ctx, cancel := context.WithCancel(stream.Context()) // ends the intake and a round when the handler returns
	defer cancel()
	k := &keepAlive{v: v, stream: stream, ctx: ctx, cancel: cancel, deposed: v.s.node.LeadershipEnds(),
		wake: make(chan struct{}, 1), slots: make(chan struct{}, maxRenewalsInFlight)}
	if planted.DeposedRenewal { // planted: a deposed leader goes on (the node answers from memory)
		k.deposed = nil
	}
	go k.intake()
	return k.rounds()
}

// keepAlive is one KeepAlive stream's state, shared by its intake and its
// rounds.
type keepAlive struct {
	v       *service
	stream  api.FenceService_KeepAliveServer
	ctx     context.Context
	cancel  context.CancelFunc
	slots   chan struct{}   // a token per renewal queued or in a round: at most maxRenewalsInFlight
	wake    chan struct{}   // the intake queued something, half-closed or failed
	deposed <-chan struct{} // closed when this node's leadership ends: the stream ends with NotLeader

	mu      sync.Mutex
	pending []renewal // queued for the next round
	closed  bool      // the client half-closed: pending holds all it sent
	err     error     // the intake's failure, which ends the stream
}

// intake reads the requests, checks each and queues it. It ends when the
// stream does (gRPC cancels the stream's context once the handler returns).
func (k *keepAlive) intake() {
	for {
		req, err := k.stream.Recv()
		if errors.Is(err, io.EOF) {
			k.end(nil)
			return
		}
		if err != nil {
			k.end(err)
			return
		}
		r, err := k.v.renewalOf(k.ctx, req)
		if err != nil {
			k.end(err)
			return
		}
		select { // the common case without the scheduler: a free slot
		case k.slots <- struct{}{}:
		default:
			select {
			case k.slots <- struct{}{}:
			case <-k.ctx.Done():
				return
			}
		}
		k.mu.Lock()
		k.pending = append(k.pending, r)
		k.mu.Unlock()
		k.poke()
	}
}

// end records that the intake stopped: at a half-close (err nil), or with
// err, which ends the stream and the round under way.
func (k *keepAlive) end(err error) {
	k.mu.Lock()
	k.closed, k.err = true, err
	k.mu.Unlock()
	if err != nil {
		k.cancel()
	}
	k.poke()
}

func (k *keepAlive) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// failure returns the intake's failure, if it had one.
func (k *keepAlive) failure() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// rounds commits and answers what the intake queued, a round at a time,
// until the client half-closed and everything is answered, or the stream
// fails.
func (k *keepAlive) rounds() error {
	for {
		select {
		case <-k.wake:
		case <-k.deposed:
			return k.v.s.notLeader()
		case <-k.ctx.Done():
			if err := k.failure(); err != nil {
				return err
			}
			return status.FromContextError(k.ctx.Err()).Err()
		}
		for {
			k.mu.Lock()
			round, closed, err := k.pending, k.closed, k.err
			k.pending = nil
			k.mu.Unlock()
			if err != nil {
				return err
			}
			if len(round) == 0 {
				if closed {
					return nil
				}
				break
			}
			if err := k.v.answerRound(k.ctx, k.stream, round); err != nil {
				if ierr := k.failure(); ierr != nil {
					return ierr
				}
				return err
			}
			for range round {
				<-k.slots
			}
		}
	}
}

// renewalOf checks one request: a malformed or refused one becomes a
// renewal answered with its error; an error ends the stream (this node does
// not lead).
func (v *service) renewalOf(ctx context.Context, req *api.KeepAliveRequest) (renewal, error) {
	id, err := leaseID(req.GetLeaseSecret())
	if err != nil {
		return renewal{seq: req.GetSeq(), bad: err}, nil
	}
	if err := v.leading(); err != nil && !(planted.DeposedRenewal && v.s.node.HasLed()) { // planted: a deposed leader goes on (the node answers from memory)
		return renewal{}, err
	}
	if err := v.s.stillPermitted(ctx, api.FenceService_KeepAlive_FullMethodName, nil); err != nil {
		return renewal{seq: req.GetSeq(), bad: err}, nil
	}
	if err := v.ownLease(ctx, id); err != nil {
		return renewal{seq: req.GetSeq(), bad: err}, nil
	}
	return renewal{lease: id, seq: req.GetSeq()}, nil
}

// ownLease refuses, under a policy, a call on a lease that another identity
// created: a lease is used only by its creator, and with its secret. A
// lease that does not live passes (the state machine answers NotFound).
func (v *service) ownLease(ctx context.Context, id fsm.LeaseID) error {
	if v.s.policy.Load() == nil {
		return nil
	}
	var l fsm.LeaseView
	var ok bool
	v.s.node.View(func(s *fsm.State) { l, ok = s.Lease(id) })
	if caller := callerOf(ctx).identity; ok && l.Identity != caller {
		method, _ := grpc.Method(ctx)
		return v.s.refused(ctx, method, caller, status.Errorf(codes.PermissionDenied,
			"lease %d was created by another identity than %q: only its creator may use it", l.Number, caller))
	}
	return nil
}

// answerRound renews the leases of one round and sends the answers in
// arrival order.
func (v *service) answerRound(ctx context.Context, stream api.FenceService_KeepAliveServer, round []renewal) error {
	rctx, cancel := context.WithTimeout(ctx, renewalRoundTimeout)
	defer cancel()
	results, err := v.renewAll(rctx, round)
	if err != nil {
		if ctx.Err() == nil && rctx.Err() != nil {
			return status.Errorf(codes.Unavailable, "this node could not commit renewals within %v (it may have lost leadership); renew on another member", renewalRoundTimeout)
		}
		return err
	}
	for _, r := range round {
		resp := &api.KeepAliveResponse{Seq: r.seq}
		if r.bad != nil {
			resp.Error = status.Convert(r.bad).Message()
		} else if res := results[r.lease]; res.Code == fsm.OK {
			resp.Ok, resp.Ttl, resp.HeldTokens = true, durationpb.New(res.TTL), res.Held
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

// renewAll proposes one Renew per distinct lease of a round (they share
// raft entries) and returns the results by lease.
func (v *service) renewAll(ctx context.Context, round []renewal) (map[fsm.LeaseID]fsm.Result, error) {
	var cmds []fsm.Command
	seen := map[fsm.LeaseID]bool{}
	for _, r := range round {
		if r.bad == nil && !seen[r.lease] {
			seen[r.lease] = true
			cmds = append(cmds, fsm.Command{Kind: fsm.KindRenew, Lease: r.lease})
		}
	}
	results, err := v.s.node.ProposeAll(ctx, cmds)
	if err != nil {
		return nil, proposeErr(err)
	}
	byLease := make(map[fsm.LeaseID]fsm.Result, len(cmds))
	for i, c := range cmds {
		byLease[c.Lease] = results[i]
	}
	return byLease, nil
}

func (v *service) Revoke(ctx context.Context, r *api.RevokeRequest) (*api.RevokeResponse, error) {
	cmd, err := v.s.limits.revoke(r)
	if err != nil {
		return nil, err
	}
	// Idempotent: a lease that has already ended (by an earlier attempt of
	// this call, by expiry, or by another revoke) answers OK.
	res, err := v.apply(ctx, cmd, fsm.LeaseNotFound)
	if err != nil {
		return nil, err
	}
	return &api.RevokeResponse{Released: res.Released}, nil
}

func (v *service) Acquire(ctx context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
	cmd, err := v.s.limits.acquire(r)
	if err != nil {
		return nil, err
	}
	// Register first, so a grant right after queueing is not missed. A retry
	// registers whatever its Wait says: its first attempt may have queued.
	wake := v.s.node.Wait(cmd.Lease, cmd.Name, cmd.Seq)
	defer v.leaveWait(cmd, wake)
	res, err := v.apply(ctx, cmd, fsm.Queued)
	if err != nil {
		return nil, err
	}
	if res.Code == fsm.OK {
		return v.s.granted(cmd.Name, res, res.LeaseNumber), nil
	}
	// Queued without wait: a retry of a waiting call whose caller gave up
	// (a first call without wait is never queued), sent to learn how the
	// call ended. It takes the call out of the queue and answers that: the
	// grant if the lock came first, else ABORTED. Waiting here instead
	// would keep the call queued for as long as the client's retries
	// overlap (leaveWait leaves the queue to an attempt still waiting), and
	// the client could not learn the outcome.
	if !r.GetWait() {
		if err := v.cancelWait(cmd); err != nil {
			return nil, proposeErr(err)
		}
		if resp, done, err := v.waitOutcome(cmd); done {
			return resp, err
		}
		return nil, status.Errorf(codes.Unavailable, "the wait for lock %q was cancelled but its outcome is not applied here yet; send the same request again", cmd.Name)
	}
	// A deposed leader applies nothing more: a call waiting here would not
	// see its grant (made by the next leader from the replicated queue) and
	// would wait out its deadline while its lease held the lock unused.
	deposed := v.s.node.LeadershipEnds()
	for { // queued: wait for this call's grant or cancellation, the end of the lease or of this leadership, or the deadline
		reloaded := v.s.policyReloaded()
		if resp, done, err := v.waitOutcome(cmd); done {
			return resp, err
		}
		// Judged again at every turn (and at every policy reload): a policy
		// that no longer lets the caller take this lock ends the wait.
		if err := v.s.stillPermitted(ctx, api.FenceService_Acquire_FullMethodName, r); err != nil {
			return v.withdraw(cmd, err)
		}
		select {
		case <-wake:
		case <-reloaded:
		case <-deposed:
			// The call stays queued in the replicated state (a deposed
			// node cannot commit its withdrawal): the same request sent
			// to the new leader waits there, or answers its grant.
			return nil, status.Errorf(codes.Unavailable, "this member stopped leading while the call waited for lock %q; send the same request to the new leader", cmd.Name)
		case <-ctx.Done():
			return v.giveUp(ctx, cmd)
		}
	}
}

// withdraw takes a queued call out of the queue because the policy now
// refuses it, and answers refused — unless the lock was granted to it
// first, when the grant is the answer: its caller must know it holds it
// (the lease's renewals, judged by the same policy, then decide how long).
func (v *service) withdraw(cmd fsm.Command, refused error) (*api.AcquireResponse, error) {
	if err := v.cancelWait(cmd); err != nil {
		return nil, proposeErr(err) // unknown whether it was granted: the client retries the call
	}
	if resp, done, err := v.waitOutcome(cmd); done && err == nil {
		return resp, nil
	}
	return nil, refused
}

// waitOutcome looks at this call's remembered answer (not at the lock: it
// may be held by another call of the same lease): granted, cancelled, lease
// gone, or still queued (done=false).
func (v *service) waitOutcome(cmd fsm.Command) (resp *api.AcquireResponse, done bool, err error) {
	v.s.node.View(func(s *fsm.State) {
		l, alive := s.Lease(cmd.Lease)
		if !alive {
			done, err = true, refusal(&cmd, &fsm.Result{Code: fsm.LeaseNotFound})
			return
		}
		r, found := s.Answer(cmd.Lease, cmd.Seq, cmd.Name)
		switch {
		case !found: // acknowledged: its client has the answer from another attempt
			done, err = true, refusal(&cmd, &fsm.Result{Code: fsm.Answered})
		case r.Code == fsm.OK:
			resp, done = v.s.granted(cmd.Name, r, l.Number), true
		case r.Code != fsm.Queued:
			done, err = true, refusal(&cmd, &r)
		}
	})
	return resp, done, err
}

// giveUp leaves the queue after the caller's deadline. If the grant won the
// race, the lease holds the lock: a retry with the same request id returns it.
// (leaveWait, as the handler returns, takes the call out of the queue.)
func (v *service) giveUp(callCtx context.Context, cmd fsm.Command) (*api.AcquireResponse, error) {
	if errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		return nil, status.Errorf(codes.DeadlineExceeded, "gave up waiting for lock %q at the call's deadline", cmd.Name)
	}
	return nil, status.Errorf(codes.Canceled, "stopped waiting for lock %q: the call was cancelled", cmd.Name)
}

// leaveWait ends an Acquire handler's wait. The last attempt of the call to
// leave takes the call out of the queue if it is still queued (whatever
// ended the handler: its deadline, a cancelled call, an error); while
// another attempt still waits here (a retry that came over a new
// connection), the wait is left to it.
func (v *service) leaveWait(cmd fsm.Command, wake chan uint64) {
	if !v.s.node.Leave(cmd.Lease, cmd.Name, cmd.Seq, wake) {
		return
	}
	queued := false
	v.s.node.View(func(s *fsm.State) {
		r, found := s.Answer(cmd.Lease, cmd.Seq, cmd.Name)
		queued = found && r.Code == fsm.Queued
	})
	if !queued {
		return
	}
	_ = v.cancelWait(cmd)
}

// cancelWait takes an Acquire call out of its lock's queue if it is still
// queued there (a CancelWait; it undoes no grant), with a 5 s budget of
// its own: the call's context may have ended.
func (v *service) cancelWait(cmd fsm.Command) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := v.s.node.Propose(ctx, fsm.Command{Kind: fsm.KindCancelWait, Lease: cmd.Lease, Seq: cmd.Seq, Name: cmd.Name})
	return err
}

func (v *service) Release(ctx context.Context, r *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	cmd, err := v.s.limits.release(r, v.s.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	if _, err := v.apply(ctx, cmd); err != nil {
		return nil, err
	}
	return &api.ReleaseResponse{}, nil
}

func (v *service) GetLock(ctx context.Context, r *api.GetLockRequest) (*api.GetLockResponse, error) {
	if err := name("lock name", r.GetName()); err != nil {
		return nil, err
	}
	if err := v.s.linearizableRead(ctx); err != nil {
		return nil, err
	}
	resp := &api.GetLockResponse{Lock: &api.LockInfo{Name: r.GetName()}}
	v.s.node.ViewAt(func(s *fsm.State, index uint64) {
		if k, ok := s.Lock(r.GetName()); ok {
			resp.Lock = v.lockInfo(s, k)
		}
		for _, w := range s.Queue(r.GetName()) {
			resp.Queue = append(resp.Queue, &api.Waiter{LeaseNumber: w.Number, Owner: w.Owner, Shared: w.Shared})
		}
		resp.Index = index
	})
	return resp, nil
}

// limitOf is a request's limit: 0 means def, above most is InvalidArgument
// (the message ends with hint).
func limitOf(got uint32, def, most int, hint string) (int, error) {
	switch limit := int(got); {
	case limit == 0:
		return def, nil
	case limit > most:
		return 0, invalid("limit %d is above %d%s", limit, most, hint)
	default:
		return limit, nil
	}
}

// Page sizes of ListLocks.
const (
	defaultListLimit = 1000
	maxListLimit     = 10000
)

func (v *service) ListLocks(ctx context.Context, r *api.ListLocksRequest) (*api.ListLocksResponse, error) {
	limit, err := limitOf(r.GetLimit(), defaultListLimit, maxListLimit, "; page with after instead")
	if err != nil {
		return nil, err
	}
	if r.GetAfter() != "" {
		if err := name("after", r.GetAfter()); err != nil {
			return nil, err
		}
	}
	if err := v.s.linearizableRead(ctx); err != nil {
		return nil, err
	}
	resp := &api.ListLocksResponse{}
	var keep func(string) bool // under a policy, the caller's names only (more counts those alone)
	if pol, c := v.s.policy.Load(), callerOf(ctx); pol != nil && !c.admin {
		keep = func(name string) bool { return pol.Allows(c.identity, policy.Read, name) }
	}
	v.s.node.ViewAt(func(s *fsm.State, index uint64) {
		page, more := s.LocksAfter(r.GetAfter(), limit, keep)
		for _, k := range page {
			resp.Locks = append(resp.Locks, v.lockInfo(s, k))
		}
		resp.More, resp.Index = more, index
	})
	return resp, nil
}

// lockInfo describes k; call it inside View or ViewAt, with their state s.
func (v *service) lockInfo(s *fsm.State, k fsm.LockView) *api.LockInfo {
	info := &api.LockInfo{Name: k.Name, HolderLeaseNumber: k.HolderNum, HolderOwner: k.HolderOwner, Token: k.Token,
		Waiters: uint32(len(k.Waiters)), Delayed: k.Delayed, LockDelay: durationpb.New(k.LockDelay), Permits: k.Permits}
	info.TtlLeft = v.ttlLeft(k.Holder)
	if !k.Delayed && k.Token != 0 {
		info.HeldFor = v.heldFor(s, k.Token)
	}
	for _, g := range k.Grants {
		lg := &api.LockGrant{LeaseNumber: g.HolderNum, Owner: g.HolderOwner, Token: g.Token,
			Slot: g.Slot, Shared: g.Shared, Delayed: g.Delayed, TtlLeft: v.ttlLeft(g.Holder), LockDelay: durationpb.New(g.LockDelay)}
		if !g.Delayed {
			lg.HeldFor = v.heldFor(s, g.Token)
		}
		if g.Delayed {
			lg.DelayLeft = v.delayLeft(k.Name, g.Token)
		}
		info.Grants = append(info.Grants, lg)
	}
	for _, shared := range k.WaitersShared {
		if shared {
			info.SharedWaiters++
		}
	}
	if k.Delayed {
		info.DelayLeft = v.delayLeft(k.Name, k.Token)
	}
	return info
}

// delayLeft is how long until the lock-delay of the grant of name with
// token ends: the leader's own timer, as ttl_left, when it proposes the
// hand-off. Untracked (the hand-off proposed, not applied yet; or this
// node's duties stopping as it loses leadership) reads as due now.
func (v *service) delayLeft(name string, token uint64) *durationpb.Duration {
	left := time.Duration(0)
	if at, ok := v.s.node.DelayEnd(name, token); ok {
		left = max(0, at.Sub(v.s.cfg.Clock.Now()))
	}
	return durationpb.New(left)
}

// ttlLeft is how long the lease holder has before it expires unless
// renewed, as this leader sees it (nil for no holder).
// heldFor is how long the grant with token has been held, or nil if this
// member does not know (see LockInfo.held_for).
func (v *service) heldFor(s *fsm.State, token uint64) *durationpb.Duration {
	if d, ok := v.s.node.HeldFor(s, token); ok {
		return durationpb.New(d)
	}
	return nil
}

func (v *service) ttlLeft(holder fsm.LeaseID) *durationpb.Duration {
	if holder.IsZero() {
		return nil
	}
	if d, ok := v.s.node.Deadline(holder); ok {
		return durationpb.New(max(0, d.Sub(v.s.cfg.Clock.Now())))
	}
	return nil
}

func (v *service) Put(ctx context.Context, r *api.PutRequest) (*api.PutResponse, error) {
	cmd, err := v.s.limits.put(r)
	if err != nil {
		return nil, err
	}
	if _, err := v.apply(ctx, cmd); err != nil {
		return nil, err
	}
	return &api.PutResponse{}, nil
}

func (v *service) Get(ctx context.Context, r *api.GetRequest) (*api.GetResponse, error) {
	if err := name("key", r.GetKey()); err != nil {
		return nil, err
	}
	if err := v.s.linearizableRead(ctx); err != nil {
		return nil, err
	}
	var (
		resp  = &api.GetResponse{}
		found bool
	)
	v.s.node.View(func(s *fsm.State) {
		resp.Value, resp.Token, found = s.Get(r.GetKey())
	})
	if !found {
		return nil, status.Errorf(codes.NotFound, "key %q has never been written", r.GetKey())
	}
	return resp, nil
}

func (v *service) ForceRelease(ctx context.Context, r *api.ForceReleaseRequest) (*api.ForceReleaseResponse, error) {
	cmd, err := v.s.limits.forceRelease(r)
	if err != nil {
		return nil, err
	}
	res, err := v.apply(ctx, cmd)
	if err != nil {
		return nil, err
	}
	v.s.log.Warn("admin force-release: ended one grant", "caller", callerAddr(ctx), "lock", cmd.Name, "lease", res.LeaseNumber,
		"owner", res.Owner, "token", res.Token, "reason", r.GetReason())
	return &api.ForceReleaseResponse{RevokedLeaseNumber: res.LeaseNumber, RevokedOwner: res.Owner, Released: res.Released}, nil
}

// newRandom returns 16 bytes from crypto/rand (which never fails on Linux;
// if it ever did, it would crash the process rather than return weak ids).
func newRandom() [16]byte {
	var b [16]byte
	rand.Read(b[:])
	return b
}
