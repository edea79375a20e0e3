package bench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// Target is the lock service under load. fence is the default; the peers
// module (bench/) plugs in etcd and Redis, so every system runs the same
// loops and is measured the same way.
type Target interface {
	// Name names the system in reports.
	Name() string
	// Locker connects worker w with its own connection and session.
	Locker(ctx context.Context, w int) (Locker, error)
	// Renewer opens worker w's lease and renewal stream, or returns
	// ErrUnsupported.
	Renewer(ctx context.Context, w int) (Renewer, error)
}

// ErrUnsupported: the target has no such workload.
var ErrUnsupported = errors.New("not supported by this target")

// Locker takes and gives back locks for one worker.
type Locker interface {
	// Lock blocks until name is held (FIFO where the system has a queue)
	// and returns how to release it.
	Lock(ctx context.Context, name string) (release func(context.Context) error, err error)
	Close() error
}

// Relocker is a Locker that can release a grant and take the same name
// again in one call (Config.Relock).
type Relocker interface {
	Locker
	// Hold blocks until name is held and returns the grant.
	Hold(ctx context.Context, name string) (Grant, error)
}

// Grant is a lock a Relocker holds.
type Grant interface {
	// Relock releases the grant and blocks until the name is held again
	// (waiters queued first are granted first), in one call; it returns the
	// new grant. On an error no grant is held.
	Relock(ctx context.Context) (Grant, error)
	// Release gives the lock back.
	Release(ctx context.Context) error
}

// Renewer renews one lease over one stream, with several renewals in flight.
type Renewer interface {
	// Send sends renewal seq.
	Send(seq uint64) error
	// Recv waits for the next answer: which renewal, and whether the lease lived.
	Recv() (seq uint64, ok bool, err error)
	Close() error
}

// LeaseCreator is a Target that can create bare leases (the many-leases
// workload).
type LeaseCreator interface {
	// LeaseCreator connects worker w and returns how to create one lease of
	// ttl, and how to disconnect. create returns ErrTryAgain when the call
	// did not count (e.g. it reached a follower and moved on).
	LeaseCreator(ctx context.Context, w int, ttl time.Duration) (create func(context.Context) error, closeFn func(), err error)
}

// ErrTryAgain: the call did not happen; make it again.
var ErrTryAgain = errors.New("try again")

// Fence is the fence cluster (or server) at Servers.
type Fence struct {
	Servers []string
	TTL     time.Duration
	// TLS is the client's TLS config (a client certificate of the
	// cluster's CA); nil talks plaintext to servers started with --insecure.
	TLS *tls.Config
	// Service is the path prefix the servers serve the API under, when it
	// is not this fence's (/fence.v1.FenceService/): a fence from before the
	// fence.v1 cut serves /fence.v1.Fence/, with messages of the same field
	// numbers, so the calls are renamed on the way (an earlier fence
	// measured in the same run).
	Service string
}

// DialOptions are the gRPC options every connection to the servers needs:
// none, or a renaming of every call's service to f.Service.
func (f Fence) DialOptions() []grpc.DialOption {
	if f.Service == "" {
		return nil
	}
	rename := func(method string) string {
		return strings.Replace(method, "/"+api.FenceService_ServiceDesc.ServiceName+"/", f.Service, 1)
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoke(ctx, rename(method), req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, stream grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return stream(ctx, desc, cc, rename(method), opts...)
		}),
	}
}

// Name returns "fence".
func (f Fence) Name() string { return "fence" }

// Locker dials a client of its own (own connection, own session).
func (f Fence) Locker(ctx context.Context, _ int) (Locker, error) {
	sec := client.WithInsecure()
	if f.TLS != nil {
		sec = client.WithTLS(f.TLS)
	}
	c, err := client.Dial(ctx, f.Servers, sec, client.WithTTL(f.TTL), client.WithLockDelay(0), client.WithDialOptions(f.DialOptions()...))
	if err != nil {
		return nil, err
	}
	return fenceLocker{c}, nil
}

type fenceLocker struct{ c *client.Client }

func (l fenceLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lease, err := l.c.Lock(ctx, name)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}

// Hold takes name and returns the grant, for Config.Relock.
func (l fenceLocker) Hold(ctx context.Context, name string) (Grant, error) {
	lease, err := l.c.Lock(ctx, name)
	if err != nil {
		return nil, err
	}
	return fenceGrant{lease}, nil
}

func (l fenceLocker) Close() error { return l.c.Close() }

// fenceGrant is a held client.Lease.
type fenceGrant struct{ *client.Lease }

// Relock is Lease.Relock: one Acquire with release_token.
func (g fenceGrant) Relock(ctx context.Context) (Grant, error) {
	next, err := g.Lease.Relock(ctx)
	if err != nil {
		return nil, err
	}
	return fenceGrant{next}, nil
}

// Renewer creates a lease and opens a KeepAlive stream straight on the API
// (full speed needs the stream itself, not the client's TTL/3 schedule), on
// the member that leads: followers refuse, and the next member is tried.
func (f Fence) Renewer(ctx context.Context, w int) (Renewer, error) {
	var errs []error
	for i := range f.Servers {
		addr := f.Servers[(w+i)%len(f.Servers)]
		r, err := f.renewerAt(ctx, addr)
		if err == nil {
			return r, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("create a lease: %w", errors.Join(errs...))
}

func (f Fence) renewerAt(ctx context.Context, addr string) (Renewer, error) {
	conn, err := f.dial(addr)
	if err != nil {
		return nil, err
	}
	fc := api.NewFenceServiceClient(conn)
	lease, err := fc.CreateLease(ctx, &api.CreateLeaseRequest{RequestId: newRequestID(), Ttl: durationpb.New(f.TTL), Owner: "fence-bench"})
	if err != nil {
		conn.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := fc.KeepAlive(sctx)
	if err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	return &fenceRenewer{fc: fc, conn: conn, cancel: cancel, stream: stream, lease: lease.LeaseSecret}, nil
}

type fenceRenewer struct {
	fc     api.FenceServiceClient
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	stream api.FenceService_KeepAliveClient
	lease  []byte
}

func (r *fenceRenewer) Send(seq uint64) error {
	return r.stream.Send(&api.KeepAliveRequest{LeaseSecret: r.lease, Seq: seq})
}

func (r *fenceRenewer) Recv() (uint64, bool, error) {
	resp, err := r.stream.Recv()
	if err != nil {
		return 0, false, err
	}
	return resp.Seq, resp.Ok, nil
}

// Close ends the stream first (renewals still pending are not wanted: the
// server would answer them, after the revoke, with ok=false), then revokes
// the lease.
func (r *fenceRenewer) Close() error {
	r.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := r.fc.Revoke(ctx, &api.RevokeRequest{RequestId: newRequestID(), LeaseSecret: r.lease})
	return errors.Join(err, r.conn.Close())
}

// LeaseCreator creates leases straight on the API, one member at a time: a
// follower's refusal moves the worker to the next member.
func (f Fence) LeaseCreator(_ context.Context, w int, ttl time.Duration) (func(context.Context) error, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	var clients []api.FenceServiceClient
	for _, addr := range f.Servers {
		conn, err := f.dial(addr)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, conn)
		clients = append(clients, api.NewFenceServiceClient(conn))
	}
	at := w % len(clients)
	create := func(ctx context.Context) error {
		_, err := clients[at].CreateLease(ctx, &api.CreateLeaseRequest{RequestId: newRequestID(), Ttl: durationpb.New(ttl), Owner: "fence-bench"})
		if status.Code(err) == codes.Unavailable {
			at = (at + 1) % len(clients)
			return ErrTryAgain
		}
		return err
	}
	return create, closeAll, nil
}

// dial connects straight to the API at addr; calls wait for the connection
// (bounded by their context).
func (f Fence) dial(addr string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if f.TLS != nil {
		creds = credentials.NewTLS(f.TLS.Clone())
	}
	return grpc.NewClient(addr, append(f.DialOptions(), grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))...)
}

// newRequestID returns the 16 random bytes every mutating call carries.
func newRequestID() []byte {
	b := make([]byte, 16)
	rand.Read(b)
	return b
}
