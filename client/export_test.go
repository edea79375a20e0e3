package client

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"

	"github.com/fencehq/fence/internal/clock"
)

// WithClock makes the client time its leases on c (a clocktest.Fake), for
// the tests in package client_test.
func WithClock(c clock.Clock) Option { return withClock(c) }

// WithSettleFor bounds how long the client tries to settle an unknown
// outcome before it gives up the whole session.
func WithSettleFor(d time.Duration) Option { return func(o *options) { o.settleFor = d } }

// MaxValueLen is the largest value Campaign accepts.
const MaxValueLen = maxValueLen

// MaxNameLen is the longest lock name Lock accepts.
const MaxNameLen = maxNameLen

// UnaryOnly makes the client's Session streams fail UNIMPLEMENTED, as an
// older server answers, so Acquire and Release go as unary calls (the
// tests that inject faults into unary calls).
func UnaryOnly() grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == api.FenceService_Session_FullMethodName {
			return nil, status.Error(codes.Unimplemented, "injected: an older server")
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
}
