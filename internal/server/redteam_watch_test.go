package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fencehq/fence/api"
)

// Red team: Watch.

// TestRedTeamWatchDoesNotHoldUpClose: an open Watch of a quiet lock must
// end (UNAVAILABLE, so the client moves to another member) when the server
// closes, not hold Close up until its 2s GracefulStop deadline runs out.
func TestRedTeamWatchDoesNotHoldUpClose(t *testing.T) {
	n := startNode(t, nil)
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	w, err := n.cli.Watch(wctx, &api.WatchRequest{Name: "quiet"})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, w) // the start mark: the stream is open
	start := time.Now()
	n.stop()
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v with a Watch open", took)
	}
	var last error
	for range 10 {
		if _, last = w.Recv(); last != nil {
			break
		}
	}
	if code(last) != codes.Unavailable {
		t.Errorf("the watch ended with %v, want UNAVAILABLE", last)
	}
}
