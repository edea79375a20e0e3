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

// recv reads one watch message, failing the test if none comes in 5s.
func recv(t *testing.T, s api.FenceService_WatchClient) *api.WatchResponse {
	t.Helper()
	got := make(chan *api.WatchResponse, 1)
	errc := make(chan error, 1)
	go func() {
		r, err := s.Recv()
		if err != nil {
			errc <- err
			return
		}
		got <- r
	}()
	select {
	case r := <-got:
		return r
	case err := <-errc:
		t.Fatalf("watch ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no watch message within 5s")
	}
	return nil
}

// describe renders a message's events as "type name #lease owner token cause" lines.
func describe(r *api.WatchResponse) string {
	var b strings.Builder
	for _, e := range r.Events {
		fmt.Fprintf(&b, "%s %s #%d %s t%d %s", strings.TrimPrefix(e.Type.String(), "TYPE_"), e.Name, e.LeaseNumber, e.Owner, e.Token,
			strings.TrimPrefix(e.Cause.String(), "CAUSE_"))
		if len(e.Value) > 0 {
			fmt.Fprintf(&b, " =%s", e.Value)
		}
		b.WriteString(";")
	}
	return b.String()
}

// nextEvents skips progress marks and returns the next message with events.
func nextEvents(t *testing.T, s api.FenceService_WatchClient) *api.WatchResponse {
	t.Helper()
	for {
		if r := recv(t, s); len(r.Events) > 0 {
			return r
		}
	}
}

func TestWatchLock(t *testing.T) {
	n := startNode(t, nil)
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	w, err := n.cli.Watch(wctx, &api.WatchRequest{Name: "job"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := n.lease(10*time.Second, "alice"), n.lease(10*time.Second, "bob")
	if _, err := n.acquire(a, "job", false); err != nil {
		t.Fatal(err)
	}
	if _, err := n.acquire(a, "other", false); err != nil { // not watched
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := n.acquire(b, "job", true); waited <- err }()
	first := nextEvents(t, w)
	want := []string{
		"GRANTED job #1 alice t1 UNSPECIFIED;",
		"WAITER_JOINED job #2 bob t0 UNSPECIFIED;",
		"RELEASED job #1 alice t1 RELEASED;GRANTED job #2 bob t3 UNSPECIFIED;",
		"RELEASED job #2 bob t3 REVOKED;",
	}
	if got := describe(first); got != want[0] {
		t.Fatalf("got %q, want %q", got, want[0])
	}
	second := nextEvents(t, w)
	if got := describe(second); got != want[1] {
		t.Fatalf("got %q, want %q", got, want[1])
	}
	if _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "job"}); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	third := nextEvents(t, w)
	if got := describe(third); got != want[2] {
		t.Fatalf("got %q, want %q (the handoff is one entry)", got, want[2])
	}
	if _, err := n.cli.Revoke(ctx(t), &api.RevokeRequest{RequestId: newReq(), LeaseSecret: b}); err != nil {
		t.Fatal(err)
	}
	if got := describe(nextEvents(t, w)); got != want[3] {
		t.Fatalf("got %q, want %q", got, want[3])
	}
	// A fenced write of the key of the same name shows, with its value; one
	// of another key does not.
	for _, key := range []string{"other", "job"} {
		if _, err := n.cli.Put(ctx(t), &api.PutRequest{RequestId: newReq(), Key: key, Value: []byte("v@" + key), Token: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := describe(nextEvents(t, w)), "WRITTEN job #0  t3 UNSPECIFIED =v@job;"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !(first.Index < second.Index && second.Index < third.Index) {
		t.Fatalf("indexes %d, %d, %d do not grow", first.Index, second.Index, third.Index)
	}

	// A watch from the second message's index sees the same messages again.
	again, err := n.cli.Watch(wctx, &api.WatchRequest{Name: "job", FromIndex: second.Index})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []*api.WatchResponse{second, third} {
		got := nextEvents(t, again)
		if got.Index != r.Index || describe(got) != want[i+1] {
			t.Fatalf("resumed: got %d %q, want %d %q", got.Index, describe(got), r.Index, want[i+1])
		}
	}
}

// TestWatchFromAList: a watch from a list's index + 1 sees every change
// after the list, and nothing the list already shows.
func TestWatchFromAList(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(10*time.Second, "alice")
	if _, err := n.acquire(a, "jobs/one", false); err != nil {
		t.Fatal(err)
	}
	list, err := n.cli.ListLocks(ctx(t), &api.ListLocksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if list.Index == 0 || len(list.Locks) != 1 {
		t.Fatalf("list: index %d, %d locks", list.Index, len(list.Locks))
	}
	if _, err := n.acquire(a, "jobs/two", false); err != nil {
		t.Fatal(err)
	}
	if _, err := n.acquire(a, "other/three", false); err != nil {
		t.Fatal(err)
	}
	got, err := n.cli.GetLock(ctx(t), &api.GetLockRequest{Name: "other/three"})
	if err != nil || got.Index <= list.Index {
		t.Fatalf("GetLock: index %d after the list's %d (%v)", got.GetIndex(), list.Index, err)
	}
	w, err := n.cli.Watch(ctx(t), &api.WatchRequest{Name: "jobs/", Prefix: true, FromIndex: list.Index + 1})
	if err != nil {
		t.Fatal(err)
	}
	if r := nextEvents(t, w); describe(r) != "GRANTED jobs/two #1 alice t2 UNSPECIFIED;" {
		t.Fatalf("got %q", describe(r))
	}
}

// TestWatchProgress: a watch of a quiet lock gets progress marks with the
// index things got to.
func TestWatchProgress(t *testing.T) {
	n := startNode(t, nil)
	w, err := n.cli.Watch(ctx(t), &api.WatchRequest{Name: "quiet"})
	if err != nil {
		t.Fatal(err)
	}
	a := n.lease(10*time.Second, "alice")
	if _, err := n.acquire(a, "busy", false); err != nil {
		t.Fatal(err)
	}
	start := recv(t, w)
	if len(start.Events) != 0 {
		t.Fatalf("the first message has %d events, want the start mark", len(start.Events))
	}
	r := recv(t, w)
	if len(r.Events) != 0 || r.Index <= start.Index {
		t.Fatalf("got %d events at index %d, want a progress mark after %d", len(r.Events), r.Index, start.Index)
	}
}

func TestWatchCompacted(t *testing.T) {
	n := startNode(t, func(c *Config) { c.WatchHistory = 2 })
	a := n.lease(10*time.Second, "alice")
	for i := range 4 {
		if _, err := n.acquire(a, fmt.Sprintf("l%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	w, err := n.cli.Watch(ctx(t), &api.WatchRequest{Name: "l0", FromIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Recv()
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "list the locks again") {
		t.Fatalf("got %v, want FAILED_PRECONDITION telling to list again", err)
	}
	var detail *api.WatchCompacted
	for _, d := range st.Details() {
		if c, ok := d.(*api.WatchCompacted); ok {
			detail = c
		}
	}
	if detail == nil || detail.FromIndex != 1 || detail.OldestIndex <= 1 {
		t.Fatalf("detail %v, want WatchCompacted from 1 with a later oldest index", detail)
	}
}

func TestWatchRefusesBadInput(t *testing.T) {
	n := startNode(t, nil)
	for _, r := range []*api.WatchRequest{
		{},                                // no name, no prefix
		{Name: "a\x00b"},                  // a control character
		{Name: strings.Repeat("x", 257)},  // too long
		{Name: "tab\there", Prefix: true}, // a control character
	} {
		w, err := n.cli.Watch(ctx(t), r)
		if err == nil {
			_, err = w.Recv()
		}
		if code(err) != codes.InvalidArgument {
			t.Errorf("Watch(%q, prefix %v): %v, want INVALID_ARGUMENT", r.Name, r.Prefix, err)
		}
	}
}
