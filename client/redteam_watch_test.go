package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// Red team: Watch.

// TestRedTeamWatchEndsWhenTheClientCloses: Client.Close closes the gRPC
// connections a running Watch streams on. The watch's Events must close
// (with an error matching ErrClosed), not spin retrying on the closed
// connection forever (a goroutine leak; a consumer ranging over Events
// hangs).
func TestRedTeamWatchEndsWhenTheClientCloses(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	w, err := c.Watch(ctxT(t, 30*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-w.Events():
		if ok {
			t.Fatal("an event after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Events still open 5s after the Client closed (Err %v)", w.Err())
	}
	if !errors.Is(w.Err(), client.ErrClosed) {
		t.Fatalf("Err %v, want ErrClosed", w.Err())
	}
}
