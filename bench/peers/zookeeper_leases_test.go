package peers

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// Held sessions are pinged until close, which closes their connections;
// a session added after close is refused and its connection closed.
func TestZKHeldPingsUntilClose(t *testing.T) {
	var h zkHeld
	ours, server := net.Pipe()
	defer server.Close()
	if err := h.add(ours, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_ = server.SetReadDeadline(time.Now().Add(30 * time.Second)) // generous: the pings come every 10 ms
	for i := 0; i < 2; i++ {
		got := make([]byte, len(zkPing))
		if _, err := io.ReadFull(server, got); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		if !bytes.Equal(got, zkPing) {
			t.Fatalf("ping %d: % x, want % x", i, got, zkPing)
		}
	}
	_ = server.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	go func() { // drain, so close's pinger is not stuck in a write
		_, _ = io.Copy(io.Discard, server)
		close(done)
	}()
	h.close()
	select {
	case <-done: // the pipe's other end was closed
	case <-time.After(30 * time.Second):
		t.Fatal("close left the session's connection open")
	}
	late, lateServer := net.Pipe()
	defer lateServer.Close()
	if err := h.add(late, time.Millisecond); err == nil {
		t.Error("a session added after close was accepted")
	}
	if _, err := late.Write([]byte{1}); err == nil {
		t.Error("the refused session's connection is still open")
	}
}
