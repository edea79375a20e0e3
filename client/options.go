package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/hold"
	"github.com/fencehq/fence/internal/pki"
)

// Option configures a Client (Dial) or one lock (Lock, TryLock, Do).
type Option func(*options)

type options struct {
	ttl        time.Duration
	margin     time.Duration // 0: ttl/10
	lockDelay  *time.Duration
	oncePer    time.Duration // WithOncePer; 0: none
	permits    uint32        // Semaphore; 0: a lock of one permit
	shared     bool          // RWLock.RLock: a reader's grant
	owner      string
	waiting    func(leaseNumber uint64) // WithWaiting
	observer   Observer
	dialOpts   []grpc.DialOption
	tls        *tls.Config // WithTLS, WithTLSFiles, or the FENCE_CA/CERT/KEY files
	tlsFiles   *pki.Files  // WithTLSFiles: read by Dial
	insecure   bool        // WithInsecure: plaintext
	adminToken string
	token      string      // WithToken: the identity's bearer token, on every call
	clock      clock.Clock // lease timing: deadlines, renewals; tests inject a fake
	settleFor  time.Duration
	failFast   bool         // WithFailFast
	tracer     trace.Tracer // WithTracerProvider; nil: no spans, no trace context sent
}

func defaults() options {
	host, _ := os.Hostname()
	return options{ttl: 30 * time.Second, owner: host + "/" + strconv.Itoa(os.Getpid()), observer: nopObserver{}, clock: clock.Real{}}
}

func (o *options) apply(opts []Option) {
	for _, f := range opts {
		f(o)
	}
}

// safetyMargin returns the margin of a lease with o.ttl: the one set with
// WithSafetyMargin or else TTL/10, raised to TTL × 1000 ppm + 10ms (see
// hold.Margin for why). A margin that leaves no time (≥ the TTL) is an
// ErrInvalid.
func (o *options) safetyMargin() (time.Duration, error) {
	m, err := hold.Margin(o.ttl, o.margin)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return m, nil
}

// WithTTL sets the lease TTL (default 30s). The client renews every TTL/3; a
// holder that cannot renew for a whole TTL loses the lock. Choose a TTL well
// above your worst renewal hiccup, and as short as your failover budget allows:
// after a crash the lock waits up to one TTL (plus the lock-delay).
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithSafetyMargin sets how long before the server's earliest possible expiry
// the client stops trusting a lease (default TTL/10 of that lease's own TTL).
// It absorbs clock-rate differences and the time your code needs to stop. It
// is never less than TTL × 1000 ppm + 10ms (two clocks each within NTP's
// 500 ppm frequency tolerance, plus timer latency): a smaller value is
// raised to that. A margin as long as the TTL is refused with ErrInvalid.
// Locks with the same TTL and margin share one server lease.
func WithSafetyMargin(d time.Duration) Option { return func(o *options) { o.margin = d } }

// WithLockDelay sets the lock-delay of a grant: if this holder's lease
// expires, the lock is not re-granted for d (default: the server's, 5s).
func WithLockDelay(d time.Duration) Option { return func(o *options) { o.lockDelay = &d } }

// WithOncePer makes a lock run a job at most once per window d across
// everyone who takes the lock with it: Lock and TryLock fail with a
// *RanError (errors.Is(err, ErrRanRecently)) while a successful run of the
// lock finished less than d ago, and Do records its run as successful when
// fn returns nil (Lease.ReleaseRan does so for Lock and TryLock). A waiting
// Lock fails the same way when the holder it waited for records its run; a
// run that fails, or whose lease ends first, records nothing, and the next
// waiter runs. The window is measured by the cluster (its leaders'
// monotonic clocks, through the log), never by a host's clock, from the end
// of the run; it counts no time while the cluster has no leader, so it
// never ends early. Give every host of one job the same d: a run is kept
// for the window it was granted under. d is at most 366 days. As the
// window counts from the end of a run, a job on a fixed schedule needs a
// window shorter than its period (a nightly job: say 20h, not 24h). It is
// for a lock of one permit (Lock, TryLock, Do): with a Semaphore of more
// permits, or a reader's grant, the server refuses it (ErrInvalid), as
// holders at once would each run the job.
func WithOncePer(d time.Duration) Option { return func(o *options) { o.oncePer = d } }

// withClock sets the clock that times leases (tests: clocktest.Fake).
func withClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithOwner sets the label others see for this client's leases (default host/pid).
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }

// WithWaiting calls fn with the number of the lease that is about to wait
// for the lock: Lock (and LockDetached with wait) call it just before each
// waiting Acquire is sent. While the call waits, that number is this
// caller's entry in the lock's queue (Status: LockInfo.Queue), which is how a
// caller shows where it stands. One Lock may call fn more than once (if its
// lease ends while it waits, it waits again under a new one). TryLock never
// calls it, nor does the local wait for another caller of the same Client.
// fn runs on the calling goroutine and must return at once.
func WithWaiting(fn func(leaseNumber uint64)) Option { return func(o *options) { o.waiting = fn } }

// WithObserver receives the client's events for metrics (see package clientmetrics).
func WithObserver(obs Observer) Option { return func(o *options) { o.observer = obs } }

// WithAdminToken sends token with admin calls (ForceRelease, AddMember,
// RemoveMember, TransferLeader), for servers started with an admin token.
// Without a token, servers accept admin calls only from their own machine.
func WithAdminToken(token string) Option { return func(o *options) { o.adminToken = token } }

// WithTLS connects over TLS with cfg (its certificate identifies this
// client; its RootCAs must hold the cluster's CA). fence servers require a
// client certificate unless they run with --insecure.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) { o.tls, o.tlsFiles, o.insecure = cfg, nil, false }
}

// WithTLSFiles connects over TLS with the client certificate certFile and
// its key keyFile, trusting servers whose certificates chain to caFile (PEM
// files, as `fence certs` writes them; a dev server keeps them in
// <data-dir>/tls: ca.crt, client.crt, client.key). Dial reads them.
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *options) {
		o.tls, o.tlsFiles, o.insecure = nil, &pki.Files{CA: caFile, Cert: certFile, Key: keyFile}, false
	}
}

// WithInsecure connects in plaintext, to a server started with --insecure:
// anyone on the network path can read and change the calls, lease secrets
// included. Only for tests and trusted loopback setups.
func WithInsecure() Option {
	return func(o *options) { o.tls, o.tlsFiles, o.insecure = nil, nil, true }
}

// Environment variables naming a client's TLS files when no TLS option is
// given (all three, or none).
const (
	EnvCA   = "FENCE_CA"
	EnvCert = "FENCE_CERT"
	EnvKey  = "FENCE_KEY"
)

// errNoTLS: Dial got no TLS option and no FENCE_CA/CERT/KEY.
var errNoTLS = errors.New("fence: no TLS configured: pass client.WithTLSFiles(ca, cert, key) (a dev server's are in <data-dir>/tls), " +
	"set " + EnvCA + ", " + EnvCert + " and " + EnvKey + ", or pass client.WithInsecure() for a server started with --insecure")

// transportTLS resolves how Dial connects: nil for plaintext (WithInsecure),
// else the TLS config from the options or the environment.
func (o *options) transportTLS() (*tls.Config, error) {
	switch {
	case o.insecure:
		return nil, nil
	case o.tls != nil:
		return o.tls.Clone(), nil
	case o.tlsFiles != nil:
		cfg, err := pki.ClientTLS(*o.tlsFiles)
		if err != nil {
			return nil, fmt.Errorf("fence: TLS files: %w", err)
		}
		return cfg, nil
	}
	env := pki.Files{CA: os.Getenv(EnvCA), Cert: os.Getenv(EnvCert), Key: os.Getenv(EnvKey)}
	if !env.Set() {
		return nil, errNoTLS
	}
	cfg, err := pki.ClientTLS(env)
	if err != nil {
		return nil, fmt.Errorf("fence: TLS files from %s, %s, %s: %w", EnvCA, EnvCert, EnvKey, err)
	}
	return cfg, nil
}

// WithToken sends token ("authorization: Bearer <token>") with every call:
// the identity of a client without a certificate, under a server's policy
// (--policy-file names the token's SHA-256; 'fence policy hash-token'
// computes it). It is sent only over TLS.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithFailFast makes Dial give up as soon as every member has failed once
// with an answer (its name does not resolve, it refused the connection,
// its TLS handshake failed, it does not speak fence's gRPC) instead of
// retrying until its context ends; a member that does not answer is still
// waited for. For command-line tools, where a person waits; a service that
// may start before the servers should leave it off.
func WithFailFast() Option { return func(o *options) { o.failFast = true } }

// WithDialOptions passes options to grpc.NewClient (TLS credentials, interceptors).
// Without any, the client connects without TLS.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Observer receives client events, for metrics. Implementations must be
// safe for concurrent use and must not block.
type Observer interface {
	// RenewalSent: a renewal was sent; ok says whether it succeeded.
	RenewalSent(ok bool)
	// LeaseLost: a lease ended without the holder releasing it.
	LeaseLost(reason error)
	// AcquireWait: how long a Lock or TryLock call waited, granted or not.
	AcquireWait(d time.Duration, granted bool)
}

type nopObserver struct{}

func (nopObserver) RenewalSent(bool)                {}
func (nopObserver) LeaseLost(error)                 {}
func (nopObserver) AcquireWait(time.Duration, bool) {}
