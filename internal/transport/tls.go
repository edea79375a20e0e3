package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// tlsConn is a TLS connection (Config.ServerTLS, Config.ClientTLS) whose
// Close closes the TCP connection under it at once. tls.Conn.Close would
// first send a close_notify alert, which waits up to 5 s for a peer that
// stopped reading; the alert adds nothing here, since frames say where a
// stream ends (a connection cut inside a frame is an error, between frames
// an EOF, with or without the alert).
type tlsConn struct {
	*tls.Conn
	raw net.Conn // the TCP connection
}

func (c *tlsConn) Close() error { return c.raw.Close() }

// serverHandshake does the server's TLS handshake on c, which must be over
// by deadline (the handshake's reads and its writes); a timeout is reported
// as such.
func serverHandshake(c *tlsConn, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	err := c.HandshakeContext(ctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no TLS handshake within %v", handshakeTimeout)
	}
	return err
}

// quietHandshakeError reports whether a failed server handshake is no
// refusal worth a warning: the client went away before it said anything
// (a port probe, a peer that stopped dialing), or the transport closed the
// connection itself.
func quietHandshakeError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

// clientTLS does the TLS handshake with the peer over raw, with a config of
// Config.ClientTLS, within handshakeTimeout (and ending when the peer
// stops). Its errors say so ("TLS handshake with <addr>: ..."); the caller
// closes raw on error.
func (p *peer) clientTLS(raw net.Conn) (*tlsConn, error) {
	cfg := p.t.cfg.ClientTLS(p.addr)
	if cfg == nil {
		return nil, fmt.Errorf("TLS handshake with %s: Config.ClientTLS gave no TLS config", p.addr)
	}
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		host, _, err := net.SplitHostPort(p.addr) // checked by newPeer
		if err != nil {
			return nil, fmt.Errorf("TLS handshake with %s: %w", p.addr, err)
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(raw, cfg)
	ctx, cancel := context.WithTimeout(p.ctx, handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		if p.ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no handshake within %v", handshakeTimeout)
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", p.addr, err)
	}
	return &tlsConn{Conn: tc, raw: raw}, nil
}

// explainTLSRefusal says what a TLS alert from the peer means, if err is
// one. Under TLS 1.3 the client's handshake is over before the server has
// checked the client's certificate, so a refused certificate shows only
// when the client next reads: as the peer's alert, e.g. "remote error: tls:
// unknown certificate authority".
func explainTLSRefusal(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return fmt.Errorf("the peer refused the TLS connection (is this node's certificate of the peer's CA?): %w", err)
	}
	return err
}
