package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/client"
)

// TestDialFailFast: with nothing listening, Dial with WithFailFast gives up
// at once and says the connection was refused; without it, Dial waits for
// its context and its error still says why.
func TestDialFailFast(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	// At once: it gives up on the refusal, not when its context ends (no
	// DeadlineExceeded), so no clock is needed to tell.
	_, err = client.Dial(ctxT(t, 5*time.Second), []string{addr}, client.WithInsecure(), client.WithFailFast())
	if !errors.Is(err, client.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr+": connection refused") {
		t.Fatalf("fail-fast Dial: %v, want ErrUnreachable saying %s refused", err, addr)
	}

	start := time.Now()
	_, err = client.Dial(ctxT(t, 300*time.Millisecond), []string{addr}, client.WithInsecure())
	if !errors.Is(err, client.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Dial: %v, want ErrUnreachable and DeadlineExceeded, saying the connection was refused", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("Dial without WithFailFast gave up after %v, before its context ended", took)
	}
}

// TestRefusalWording: a refused call reads as the server's message, with
// no gRPC framing, and still carries its status code.
func TestRefusalWording(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	_, err := c.Status(ctxT(t, 5*time.Second), "bad\x01name")
	if !errors.Is(err, client.ErrInvalid) || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("status of a bad name: %v (code %v), want ErrInvalid with code InvalidArgument", err, status.Code(err))
	}
	const want = `fence: status of "bad\x01name": invalid argument: lock name has a control character (U+0001) at byte 3`
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}
