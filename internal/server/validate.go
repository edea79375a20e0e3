package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/node"
)

// limits are the server's bounds on client input, on top of the fsm's hard limits.
type limits struct {
	minTTL, maxTTL time.Duration
	lockDelay      time.Duration // default
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// requestID checks the id every mutating call must carry: 16 bytes, not all
// zero. Without one a retry could not be told from a second call.
func requestID(b []byte) (fsm.RequestID, error) {
	var id fsm.RequestID
	if len(b) != len(id) {
		return id, invalid("request_id is %d bytes; send 16 random bytes, the same on every retry of one call", len(b))
	}
	copy(id[:], b)
	if id.IsZero() {
		return id, invalid("request_id is all zeros; send 16 random bytes, the same on every retry of one call")
	}
	return id, nil
}

// callNumber checks the seq, ack and open of a lease's Acquire or Release.
func callNumber(seq, ack uint64, open []uint64) error {
	if err := fsm.ValidCallNumbers(seq, ack, open); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

func leaseID(b []byte) (fsm.LeaseID, error) {
	var id fsm.LeaseID
	if len(b) != len(id) {
		return id, invalid("lease_secret is %d bytes; it must be the 16-byte secret CreateLease returned", len(b))
	}
	copy(id[:], b)
	if id.IsZero() {
		return id, invalid("lease_secret is all zeros; use the secret CreateLease returned")
	}
	return id, nil
}

func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if err := d.CheckValid(); err != nil {
		return 0, invalid("%s: %v", field, err)
	}
	return d.AsDuration(), nil
}

func name(what, s string) error {
	if err := fsm.ValidName(what, s); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

func (l limits) createLease(r *api.CreateLeaseRequest) (fsm.Command, error) {
	c := fsm.Command{Kind: fsm.KindCreateLease, Owner: r.GetOwner()}
	var err error
	if c.RequestID, err = requestID(r.GetRequestId()); err != nil {
		return c, err
	}
	if r.GetTtl() == nil {
		return c, invalid("ttl is missing; give the lease a TTL between %v and %v", l.minTTL, l.maxTTL)
	}
	if c.TTL, err = duration("ttl", r.GetTtl()); err != nil {
		return c, err
	}
	if c.TTL < l.minTTL || c.TTL > l.maxTTL {
		return c, invalid("ttl %v is outside this server's bounds %v…%v", c.TTL, l.minTTL, l.maxTTL)
	}
	if err := fsm.ValidOwner(c.Owner); err != nil {
		return c, status.Error(codes.InvalidArgument, err.Error())
	}
	return c, nil
}

func (l limits) acquire(r *api.AcquireRequest) (fsm.Command, error) {
	c := fsm.Command{Kind: fsm.KindAcquire, Name: r.GetName(), Wait: r.GetWait(), LockDelay: l.lockDelay, Seq: r.GetSeq(), Ack: r.GetAck(), Open: r.GetOpen()}
	var err error
	if c.RequestID, err = requestID(r.GetRequestId()); err != nil {
		return c, err
	}
	if err := callNumber(c.Seq, c.Ack, c.Open); err != nil {
		return c, err
	}
	if c.Lease, err = leaseID(r.GetLeaseSecret()); err != nil {
		return c, err
	}
	if err := name("lock name", c.Name); err != nil {
		return c, err
	}
	if r.GetLockDelay() != nil {
		if c.LockDelay, err = duration("lock_delay", r.GetLockDelay()); err != nil {
			return c, err
		}
		if c.LockDelay < 0 || c.LockDelay > fsm.MaxLockDelay {
			return c, invalid("lock_delay %v is outside 0…%v", c.LockDelay, fsm.MaxLockDelay)
		}
	}
	if r.GetOncePer() != nil {
		if c.OncePer, err = duration("once_per", r.GetOncePer()); err != nil {
			return c, err
		}
		if c.OncePer < 0 || c.OncePer > fsm.MaxOncePer {
			return c, invalid("once_per %v is outside 0…%v", c.OncePer, fsm.MaxOncePer)
		}
	}
	switch p := r.GetPermits(); {
	case p > fsm.MaxPermits:
		return c, invalid("permits %d is above %d", p, fsm.MaxPermits)
	case p > 1:
		c.Permits = p // 0 and 1 both ask for a lock of one permit, which the log writes as 0
	}
	if c.Shared = r.GetShared(); c.Shared && c.Permits != 0 {
		return c, invalid("shared asks for a reader's grant of a read-write lock, a lock of one permit; this Acquire asks for %d permits (a semaphore has no shared grants)", c.Permits)
	}
	if c.ReleaseToken = r.GetReleaseToken(); c.ReleaseToken != 0 && (!c.Wait || c.OncePer != 0) {
		// Without wait, a relock that found waiters would have released the
		// grant and been refused; a once-per job is not taken again at once.
		return c, invalid("release_token makes a relock, which joins the queue: set wait, and no once_per")
	}
	if c.OncePer > 0 && (c.Permits != 0 || c.Shared) {
		// The run is recorded when the first holder finishes: N permits,
		// or readers, would each run the job inside one window.
		return c, invalid("once_per runs a job once per window by one holder at a time; a semaphore's permits or a read-write lock's readers hold at once, so each would run it (use a lock of one permit, not shared)")
	}
	return c, nil
}

// release checks a Release; now is the leader's wall clock, which a
// release that records a run carries for people ("ran at …").
func (l limits) release(r *api.ReleaseRequest, now time.Time) (fsm.Command, error) {
	c := fsm.Command{Kind: fsm.KindRelease, Name: r.GetName(), Seq: r.GetSeq(), Ack: r.GetAck(), Open: r.GetOpen()}
	if r.GetRecordRun() {
		c.Ran, c.Wall = true, max(now.UnixNano(), 1) // wall clock for display only: "ran at …"; the window runs on the log's ticks
	}
	var err error
	if c.RequestID, err = requestID(r.GetRequestId()); err != nil {
		return c, err
	}
	if err := callNumber(c.Seq, c.Ack, c.Open); err != nil {
		return c, err
	}
	if c.Lease, err = leaseID(r.GetLeaseSecret()); err != nil {
		return c, err
	}
	return c, name("lock name", c.Name)
}

func (l limits) revoke(r *api.RevokeRequest) (fsm.Command, error) {
	c := fsm.Command{Kind: fsm.KindRevoke}
	var err error
	if c.RequestID, err = requestID(r.GetRequestId()); err != nil {
		return c, err
	}
	c.Lease, err = leaseID(r.GetLeaseSecret())
	return c, err
}

func (l limits) put(r *api.PutRequest) (fsm.Command, error) {
	c := fsm.Command{Kind: fsm.KindPut, Name: r.GetKey(), Token: r.GetToken()}
	if len(r.GetValue()) > 0 {
		c.Value = r.GetValue()
	}
	var err error
	if c.RequestID, err = requestID(r.GetRequestId()); err != nil {
		return c, err
	}
	if err := name("key", c.Name); err != nil {
		return c, err
	}
	if len(c.Value) > fsm.MaxValueLen {
		return c, invalid("value is %d bytes; the limit is %d", len(c.Value), fsm.MaxValueLen)
	}
	if c.Token == 0 {
		return c, invalid("token is 0; pass the fencing token of your lock grant")
	}
	return c, nil
}

func (l limits) forceRelease(r *api.ForceReleaseRequest) (fsm.Command, error) {
	c := fsm.Command{Kind: fsm.KindForceRelease, Name: r.GetName(), Token: r.GetToken()}
	var err error
	if c.RequestID, err = requestID(r.GetRequestId()); err != nil {
		return c, err
	}
	if err := name("lock name", c.Name); err != nil {
		return c, err
	}
	if err := fsm.ValidOwner(r.GetReason()); err != nil {
		return c, status.Errorf(codes.InvalidArgument, "reason: %v", err)
	}
	if c.Token == 0 {
		return c, invalid("token is 0; give the token of the grant to end (GetLock shows it), so a retry cannot end a later grant")
	}
	return c, nil
}

// refusal turns an fsm refusal into a gRPC status a person can act on.
func refusal(c *fsm.Command, r *fsm.Result) error {
	switch r.Code {
	case fsm.LeaseNotFound:
		return status.Error(codes.NotFound, "lease not found: it expired or was revoked; stop using its locks and create a new lease")
	case fsm.LockHeld:
		var st *status.Status
		if r.Delayed {
			st = status.Newf(codes.Aborted, "lock %q is in lock-delay after its holder's lease expired; try again shortly or wait", c.Name)
		} else {
			st = status.Newf(codes.Aborted, "lock %q is held by lease #%d (owner %q) with token %d", c.Name, r.LeaseNumber, r.Owner, r.Token)
		}
		return withDetail(st, &api.LockHeld{Name: c.Name, HolderLeaseNumber: r.LeaseNumber, HolderOwner: r.Owner, Token: r.Token, Delayed: r.Delayed})
	case fsm.AlreadyHeld:
		if r.Token != 0 {
			return status.Errorf(codes.AlreadyExists, "this lease already holds lock %q (token %d); release it first or reuse that grant", c.Name, r.Token)
		}
		return status.Errorf(codes.AlreadyExists, "this lease is already waiting for lock %q", c.Name)
	case fsm.NotHolder:
		if c.ReleaseToken != 0 {
			return status.Errorf(codes.FailedPrecondition, "this lease does not hold lock %q with token %d (that grant ended, or is another's): nothing was released or queued", c.Name, c.ReleaseToken)
		}
		return status.Errorf(codes.FailedPrecondition, "this lease does not hold lock %q", c.Name)
	case fsm.Ended:
		if c.Kind == fsm.KindForceRelease {
			return status.Errorf(codes.FailedPrecondition, "the grant of lock %q with token %d has already ended; nothing to release", c.Name, c.Token)
		}
		// The detail tells a relock's retry from a refused relock (NotHolder):
		// this one released its grant and was granted r.Token.
		return withDetail(status.Newf(codes.FailedPrecondition, "this call's grant of lock %q (token %d) has already ended: released or force-released", c.Name, r.Token),
			&api.GrantEnded{Name: c.Name, Token: r.Token})
	case fsm.Cancelled:
		// ABORTED without a LockHeld detail: wait again with a new call.
		return status.Errorf(codes.Aborted, "this call's wait for lock %q was cancelled (its handler ended, e.g. when the server stopped); to keep waiting, make a new call", c.Name)
	case fsm.Answered:
		return status.Errorf(codes.FailedPrecondition, "call %d of this lease was already answered and acknowledged; a late duplicate is not acted on", c.Seq)
	case fsm.TooManyCalls:
		return status.Errorf(codes.ResourceExhausted, "this lease has %d calls unacknowledged; acknowledge answered calls (ack) before making more", fsm.MaxCallsInFlight)
	case fsm.Stale:
		st := status.Newf(codes.FailedPrecondition, "stale token: %d < %d, the highest key %q has accepted; a newer holder has written, stop and re-acquire", c.Token, r.Token, c.Name)
		return withDetail(st, &api.StaleToken{Key: c.Name, Offered: c.Token, Highest: r.Token})
	case fsm.RanRecently:
		return ranRecently(c.Name, r)
	case fsm.PermitsMismatch:
		return permitsMismatch(c, r.Permits)
	case fsm.Invalid:
		return status.Error(codes.InvalidArgument, r.Reason)
	}
	return status.Errorf(codes.Internal, "unexpected outcome %v for %v", r.Code, c.Kind)
}

// ranRecently is the refusal of an Acquire with a once-per window that a
// recorded run of name is inside: FAILED_PRECONDITION with a RanRecently
// detail. A retry whose run is no longer kept knows only its token.
func ranRecently(name string, r *fsm.Result) error {
	run := r.Run
	if run.Wall == 0 {
		return withDetail(status.Newf(codes.FailedPrecondition, "lock %q already ran inside its once-per window (token %d); not running it again", name, r.Token),
			&api.RanRecently{Name: name, Token: r.Token})
	}
	at := time.Unix(0, run.Wall).UTC() // wall clock for display only: the time the run was recorded, for people
	st := status.Newf(codes.FailedPrecondition, "lock %q already ran inside its once-per window: ran at %s, by lease #%d (owner %q), token %d; %v ago by the cluster's clock",
		name, at.Format(time.RFC3339), run.LeaseNumber, run.Owner, run.Token, run.Age.Round(time.Second))
	return withDetail(st, &api.RanRecently{Name: name, Token: run.Token, LeaseNumber: run.LeaseNumber, Owner: run.Owner,
		FinishedAt: timestamppb.New(at), Ago: durationpb.New(run.Age), Window: durationpb.New(run.Window)})
}

// permitsMismatch is the refusal of an Acquire that asks for another
// permit count than its lock has: FAILED_PRECONDITION with a
// PermitsMismatch detail and a message naming both counts.
func permitsMismatch(c *fsm.Command, has uint32) error {
	asked := max(c.Permits, 1)
	what := func(n uint32) string {
		if n == 1 {
			return "a lock of one permit (a mutex or read-write lock)"
		}
		return fmt.Sprintf("a semaphore of %d permits", n)
	}
	st := status.Newf(codes.FailedPrecondition, "lock %q is %s, but this Acquire asks for %s; every holder of a name must ask for the same count (it is fixed while the lock is held or waited for)",
		c.Name, what(has), what(asked))
	return withDetail(st, &api.PermitsMismatch{Name: c.Name, Permits: has, Asked: asked})
}

func withDetail(st *status.Status, detail protoadapt.MessageV1) error {
	if s, err := st.WithDetails(detail); err == nil {
		return s.Err()
	}
	return st.Err()
}

// proposeErr turns a proposer error into a gRPC status.
func proposeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, node.ErrInvalidCommand):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, node.ErrNotLeader):
		return status.Error(codes.Unavailable, "this node is not the leader (or is still taking over); retry shortly")
	case errors.Is(err, node.ErrIndeterminate):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, node.ErrStopped):
		return status.Error(codes.Unavailable, "this node is shutting down; retry on another member")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}
