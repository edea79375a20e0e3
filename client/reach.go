package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// reach watches the connection attempts to one member and keeps why the
// last one failed, so that Dial can say what went wrong (a name that does not
// resolve, a refused connection, a port that is not a fence gRPC port)
// instead of only that its context ended. It is safe for concurrent use.
type reach struct {
	addr string
	tls  bool // the client speaks TLS to this member

	mu    sync.Mutex
	cause error // guarded by mu; why the last attempt failed (nil: none failed, or one got through)
	// guarded by mu; whether cause is an answer (nothing, refused, wrong
	// protocol) rather than a timeout or an error a retry may not see again
	answered bool
}

// failed records why an attempt failed; answered says the failure came from
// an answer of the network or the server, not a timeout.
func (r *reach) failed(cause error, answered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cause, r.answered = cause, answered
}

// last returns the cause of the last failed attempt, and whether it was an answer.
func (r *reach) last() (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause, r.answered
}

// dialOptions route the member's connections through r: a dialer that
// records TCP and DNS failures and what the server says first, and
// credentials that record TLS handshake failures. The target must use the
// passthrough resolver, so that the dialer resolves the name itself.
func (r *reach) dialOptions(creds credentials.TransportCredentials) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(r.dial),
		grpc.WithTransportCredentials(&reachCreds{TransportCredentials: creds, r: r}),
	}
}

func (r *reach) dial(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		var dnsErr *net.DNSError
		switch {
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			r.failed(fmt.Errorf("%s: no such host %q (DNS)", r.addr, dnsErr.Name), true)
		case errors.As(err, &dnsErr):
			r.failed(fmt.Errorf("%s: cannot resolve %q: %v", r.addr, dnsErr.Name, dnsErr.Err), dnsErr.IsTimeout)
		case errors.Is(err, syscall.ECONNREFUSED):
			r.failed(fmt.Errorf("%s: connection refused (nothing listens there: is 'fence serve' running, and is this its --grpc-addr?)", r.addr), true)
		default:
			r.failed(fmt.Errorf("%s: %w", r.addr, err), false)
		}
		return nil, err
	}
	return &sniffConn{Conn: conn, r: r}, nil
}

// sniffConn looks at the first bytes the server sends: a fence server
// answers a TLS client with a TLS handshake record and a plaintext client
// with an HTTP/2 frame. Anything else is a port that is not fence's (the
// metrics port answers plaintext with HTTP/1), or a TLS mismatch.
type sniffConn struct {
	net.Conn
	r      *reach
	looked bool // only the first Read is looked at (reads are sequential)
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.looked {
		c.looked = true
		if cause := c.r.wrongProtocol(p[:n], err); cause != nil {
			c.r.failed(cause, true)
		}
	}
	return n, err
}

// tlsHandshakeRecord is how a TLS server's first record starts (RFC 8446 §5.1).
const tlsHandshakeRecord = 0x16

// wrongProtocol says what is wrong when first (the first bytes read, with
// the read's error) are not what a fence server sends, or returns nil.
func (r *reach) wrongProtocol(first []byte, err error) error {
	switch {
	case bytes.HasPrefix(first, []byte("HTTP/")):
		return fmt.Errorf("%s answers HTTP/1, not gRPC: is it fence's metrics port? Clients use the --grpc-addr (default port 7300)", r.addr)
	case len(first) == 0 && errors.Is(err, io.EOF) && !r.tls:
		return fmt.Errorf("%s closed the connection at once: it probably serves TLS (fence does unless started with --insecure); drop --insecure", r.addr)
	case len(first) == 0:
		return nil
	case r.tls && first[0] != tlsHandshakeRecord:
		return fmt.Errorf("%s does not answer in TLS: a server started with --insecure needs --insecure here too", r.addr)
	case !r.tls && first[0] == tlsHandshakeRecord || !r.tls && first[0] == 0x15: // 0x15: a TLS alert
		return fmt.Errorf("%s answers in TLS, and this client speaks plaintext (--insecure): drop --insecure and give certificates", r.addr)
	}
	return nil
}

// reachCreds records a failed TLS handshake (an unknown CA, a certificate
// for another name) on its reach.
type reachCreds struct {
	credentials.TransportCredentials
	r *reach
}

func (c *reachCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tconn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err != nil && ctx.Err() == nil {
		if cause, _ := c.r.last(); cause == nil || !errors.As(err, new(tls.RecordHeaderError)) {
			c.r.failed(fmt.Errorf("%s: TLS handshake failed: %w", c.r.addr, err), true)
		}
	}
	return tconn, info, err
}

func (c *reachCreds) Clone() credentials.TransportCredentials {
	return &reachCreds{TransportCredentials: c.TransportCredentials.Clone(), r: c.r}
}

// unreachableError is Dial's error when no member could be reached: every
// member's last failure, or that it did not answer within the time Dial had.
// It matches ErrUnreachable and, if Dial's context ended, its error.
type unreachableError struct {
	causes []string
	ctxErr error // nil if Dial gave up because every member answered with a failure
}

func unreachable(rs []*reach, waited time.Duration, ctxErr error) error {
	e := &unreachableError{ctxErr: ctxErr}
	for _, r := range rs {
		if cause, _ := r.last(); cause != nil {
			e.causes = append(e.causes, cause.Error())
		} else {
			e.causes = append(e.causes, fmt.Sprintf("%s: no answer within %v", r.addr, waited.Round(100*time.Millisecond)))
		}
	}
	return e
}

func (e *unreachableError) Error() string {
	return ErrUnreachable.Error() + ": " + strings.Join(e.causes, "; ")
}

func (e *unreachableError) Unwrap() []error {
	if e.ctxErr == nil {
		return []error{ErrUnreachable}
	}
	return []error{ErrUnreachable, e.ctxErr}
}

// allAnswered reports whether every member's last attempt failed with an answer.
func allAnswered(rs []*reach) bool {
	for _, r := range rs {
		if cause, answered := r.last(); cause == nil || !answered {
			return false
		}
	}
	return true
}
