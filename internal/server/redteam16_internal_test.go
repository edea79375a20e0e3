package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fencehq/fence/api"
)

// TestDashboardWatchDropsAStuckReader: an event stream whose reader
// stopped reading (its connection open, its window shut: the kernel
// still answers TCP keepalives) is ended once a write has waited
// uiWriteTimeout; it does not hold its goroutine, its watch and the
// connection's buffers for ever.
func TestDashboardWatchDropsAStuckReader(t *testing.T) {
	saved := uiWriteTimeout
	uiWriteTimeout = 20 * time.Millisecond
	t.Cleanup(func() { uiWriteTimeout = saved }) // after the node stops (cleanups run last first)
	n := startNode(t, func(c *Config) { c.MetricsAddr = "127.0.0.1:0" })

	conn, err := net.Dial("tcp", n.srv.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ui/api/watch?prefix= HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the watch: %v %v", resp, err)
	}

	// Far more than the socket buffers hold, while nobody reads.
	lease := n.lease(time.Minute, "writer")
	got, err := n.acquire(lease, "big", false)
	if err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 1<<20)
	for range 24 {
		if _, err := n.cli.Put(ctx(t), &api.PutRequest{RequestId: newReq(), Key: "big", Value: value, Token: got.Token}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * uiWriteTimeout) // (the server is blocked on the reader: let its deadline pass)

	// The reader wakes up: it gets what was in flight, then the end.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	n64, err := io.Copy(io.Discard, resp.Body)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the stuck reader's stream is still open after %d bytes: its writes have no deadline", n64)
	}
	t.Logf("read %d bytes, then %v", n64, err)
}
