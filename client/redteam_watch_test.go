package client_test

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
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

// compactedMember is a member whose Watch says it keeps no events from the
// asked index (a member that restarted from a recent snapshot).
type compactedMember struct {
	api.UnimplementedFenceServiceServer
	watches atomic.Int32
}

func (m *compactedMember) Watch(r *api.WatchRequest, _ api.FenceService_WatchServer) error {
	m.watches.Add(1)
	st, err := status.New(codes.FailedPrecondition, "the events from that index on are no longer all kept here").
		WithDetails(&api.WatchCompacted{FromIndex: r.GetFromIndex(), OldestIndex: r.GetFromIndex() + 1000})
	if err != nil {
		return err
	}
	return st.Err()
}

// TestRedTeamWatchTriesTheOtherMembersBeforeCompacted: one member no
// longer keeps the index a watch asks for (it restarted from a snapshot
// since), another still does. "Any member serves a watch" and a watch
// "resumes from the index after the last it saw": ErrCompacted ("list
// again") should come only when no member keeps the index, not from the
// first member that happens to be current.
func TestRedTeamWatchTriesTheOtherMembersBeforeCompacted(t *testing.T) {
	ts := startServer(t)
	setup := dial(t, ts.addr)
	if _, err := setup.Lock(ctxT(t, 5*time.Second), "a"); err != nil {
		t.Fatal(err)
	}
	_, index, err := setup.ListWithIndex(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Lock(ctxT(t, 5*time.Second), "b"); err != nil {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &compactedMember{}
	gs := grpc.NewServer()
	api.RegisterFenceServiceServer(gs, fake)
	go gs.Serve(lis)
	defer gs.Stop()

	// The client's current member is the compacted one: the real member is
	// down while it dials, and back before the watch.
	ts.stop()
	c, err := client.Dial(ctxT(t, 5*time.Second), []string{lis.Addr().String(), ts.addr}, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts.start()

	w, err := c.Watch(ctxT(t, 20*time.Second), "", client.WatchPrefix(), client.WatchFrom(index+1))
	if fake.watches.Load() == 0 {
		t.Fatal("setup: the compacted member was not asked")
	}
	if err != nil {
		t.Fatalf("Watch from %d: %v; the other member keeps that index", index+1, err)
	}
	defer w.Close()
	if e := nextEvent(t, w); e.Name != "b" || e.Type != client.Granted {
		t.Fatalf("got %q, want b's grant", show(e))
	}
}

// freshMember is a member that has applied no command yet (a new cluster):
// its first Watch starts at index 0 (the start mark says 0) and then its
// stream breaks; the next Watch is recorded.
type freshMember struct {
	api.UnimplementedFenceServiceServer
	calls atomic.Int32
	from  chan uint64
}

func (m *freshMember) Watch(r *api.WatchRequest, s api.FenceService_WatchServer) error {
	if m.calls.Add(1) == 1 {
		if err := s.Send(&api.WatchResponse{Index: 0}); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "member going away")
	}
	select {
	case m.from <- r.GetFromIndex():
	default:
	}
	if err := s.Send(&api.WatchResponse{Index: max(r.GetFromIndex(), 1) - 1}); err != nil {
		return err
	}
	<-s.Context().Done()
	return s.Context().Err()
}

// TestRedTeamWatchResumesAfterAStartAtIndexZero: a watch (without
// WatchFrom) whose start mark is index 0 has seen "everything up to 0";
// when its stream breaks it must resume from 1, not ask for "from the next
// entry" (FromIndex 0) again, which loses every event applied in between.
func TestRedTeamWatchResumesAfterAStartAtIndexZero(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &freshMember{from: make(chan uint64, 1)}
	gs := grpc.NewServer()
	api.RegisterFenceServiceServer(gs, fake)
	go gs.Serve(lis)
	defer gs.Stop()
	c := dial(t, lis.Addr().String())
	w, err := c.Watch(ctxT(t, 10*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	select {
	case from := <-fake.from:
		if from != 1 {
			t.Fatalf("resumed with FromIndex %d after a start mark at 0, want 1 (0 means \"from the next entry\": a gap)", from)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not resume")
	}
}
