package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	n.stop()
	var last error
	for range 10 {
		if _, last = w.Recv(); last != nil {
			break
		}
	}
	// Ended by Close itself, not by GracefulStop's deadline (that would be
	// gRPC's own "transport is closing" once Stop cuts the stream).
	if code(last) != codes.Unavailable || !strings.Contains(status.Convert(last).Message(), "shutting down") {
		t.Errorf("the watch ended with %v, want UNAVAILABLE from the closing member", last)
	}
}

// collect reads a watch's events until a progress mark or message at or
// after index until, or 5s.
func collect(t *testing.T, w api.FenceService_WatchClient, until uint64) map[uint64]string {
	t.Helper()
	got := map[uint64]string{}
	for {
		r := recv(t, w)
		if len(r.Events) > 0 {
			got[r.Index] = describe(r)
		}
		if r.Index >= until {
			return got
		}
	}
}

// TestRedTeamWatchAfterARestartFromASnapshot: a member restarted from a
// snapshot at S (and its log after S) serves every index after S with the
// events it served before the restart, and every index at or before S with
// FAILED_PRECONDITION: nothing lost, nothing different.
func TestRedTeamWatchAfterARestartFromASnapshot(t *testing.T) {
	n := startNode(t, func(c *Config) { c.SnapshotThreshold = 4 })
	a := n.lease(time.Minute, "alice")
	for i := range 6 {
		if _, err := n.acquire(a, fmt.Sprintf("l%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	list, err := n.cli.ListLocks(ctx(t), &api.ListLocksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	last := list.Index
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	all, err := n.cli.Watch(wctx, &api.WatchRequest{Prefix: true, FromIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	before := collect(t, all, last)
	if len(before) != 6 {
		t.Fatalf("before the restart: %v", before)
	}
	n.restart()
	compacted, served := 0, 0
	for from := uint64(1); from <= last; from++ {
		w, err := n.cli.Watch(wctx, &api.WatchRequest{Prefix: true, FromIndex: from})
		if err != nil {
			t.Fatal(err)
		}
		first, err := w.Recv()
		if code(err) == codes.FailedPrecondition {
			compacted++
			continue
		}
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		served++
		if first.Index != from-1 || len(first.Events) != 0 {
			t.Fatalf("from %d: start mark %d with %d events", from, first.Index, len(first.Events))
		}
		got := map[uint64]string{}
		if first.Index < last {
			got = collect(t, w, last)
		}
		for i, d := range before {
			if i >= from && got[i] != d {
				t.Fatalf("from %d after the restart: index %d shows %q, before it showed %q", from, i, got[i], d)
			}
		}
		if len(got) > len(before) {
			t.Fatalf("from %d after the restart: %v, before %v", from, got, before)
		}
	}
	if compacted == 0 || served == 0 {
		t.Fatalf("%d indexes compacted, %d served: the snapshot did not split them", compacted, served)
	}
}
