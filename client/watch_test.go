package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
)

// nextEvent returns the watch's next event, failing the test if none
// comes within 5s.
func nextEvent(t *testing.T, w *client.Watch) client.LockEvent {
	t.Helper()
	select {
	case e, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return client.LockEvent{}
}

func show(e client.LockEvent) string {
	return fmt.Sprintf("%s %s #%d %s t%d %s", e.Type, e.Name, e.Lease, e.Owner, e.Token, e.Cause)
}

func TestWatch(t *testing.T) {
	ts := startServer(t)
	a := dial(t, ts.addr, client.WithOwner("alice"))
	b := dial(t, ts.addr, client.WithOwner("bob"))
	w, err := a.Watch(ctxT(t, 20*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	la, err := a.Lock(ctxT(t, 5*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	if got := show(nextEvent(t, w)); got != "granted job #1 alice t1 " {
		t.Fatalf("got %q", got)
	}
	locked := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctxT(t, 5*time.Second), "job")
		if err == nil {
			err = l.Release(ctxT(t, 5*time.Second))
		}
		locked <- err
	}()
	if got := show(nextEvent(t, w)); got != "waiter-joined job #2 bob t0 " {
		t.Fatalf("got %q", got)
	}
	if err := la.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	rel, next := nextEvent(t, w), nextEvent(t, w)
	if show(rel) != "released job #1 alice t1 released" || show(next) != "granted job #2 bob t2 " || rel.Index != next.Index {
		t.Fatalf("got %q at %d and %q at %d, want the release and the handoff at one index", show(rel), rel.Index, show(next), next.Index)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if got := show(nextEvent(t, w)); got != "released job #2 bob t2 released" {
		t.Fatalf("got %q", got)
	}
	w.Close()
	if _, ok := <-w.Events(); ok || w.Err() == nil {
		t.Fatalf("after Close: events still open or no error (%v)", w.Err())
	}
}

// TestWatchResumesAfterARestart: the member goes away and comes back; the
// watch resumes after the last index it saw: nothing repeated, nothing lost.
func TestWatchResumesAfterARestart(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithOwner("alice"))
	w, err := c.Watch(ctxT(t, 30*time.Second), "jobs/", client.WatchPrefix())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	l, err := c.Lock(ctxT(t, 5*time.Second), "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	first := nextEvent(t, w)
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, w)
	ts.stop()
	ts.start()
	l, err = c.Lock(ctxT(t, 10*time.Second), "jobs/b")
	if err != nil {
		t.Fatal(err)
	}
	e := nextEvent(t, w)
	if show(e) != fmt.Sprintf("granted jobs/b #%d alice t2 ", l.LeaseNumber()) || e.Index <= first.Index {
		t.Fatalf("after the restart got %q at %d, want jobs/b's grant after %d", show(e), e.Index, first.Index)
	}
}

func TestWatchFromAList(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	if _, err := c.Lock(ctxT(t, 5*time.Second), "a"); err != nil {
		t.Fatal(err)
	}
	locks, index, err := c.ListWithIndex(ctxT(t, 5*time.Second))
	if err != nil || len(locks) != 1 || index == 0 || locks[0].Index != index {
		t.Fatalf("list: %v at %d (%v)", locks, index, err)
	}
	if _, err := c.Lock(ctxT(t, 5*time.Second), "b"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctxT(t, 10*time.Second), "", client.WatchPrefix(), client.WatchFrom(index+1))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if e := nextEvent(t, w); e.Name != "b" || e.Type != client.Granted {
		t.Fatalf("got %q, want b's grant (a's is in the list)", show(e))
	}
}

func TestWatchCompacted(t *testing.T) {
	cfg := locktest.Config(t.TempDir())
	cfg.WatchHistory = 1
	srv, err := locktest.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := dial(t, srv.GRPCAddr())
	for _, name := range []string{"a", "b", "c"} {
		if _, err := c.Lock(ctxT(t, 5*time.Second), name); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.Watch(ctxT(t, 5*time.Second), "a", client.WatchFrom(1))
	if !errors.Is(err, client.ErrCompacted) || !strings.Contains(err.Error(), "list the locks again") {
		t.Fatalf("got %v, want ErrCompacted", err)
	}
}

func TestWatchRefusesBadNames(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	for _, name := range []string{"", "a\x00b", strings.Repeat("x", 300)} {
		if _, err := c.Watch(ctxT(t, 5*time.Second), name); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("Watch(%q): %v, want ErrInvalid", name, err)
		}
	}
}

// TestEventNames: the client's event types and causes are the API's, by
// number and name.
func TestEventNames(t *testing.T) {
	for v, name := range api.LockEvent_Type_name {
		if v == 0 {
			continue
		}
		want := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "TYPE_")), "_", "-")
		if got := client.EventType(v).String(); got != want {
			t.Errorf("event type %d: %q, want %q", v, got, want)
		}
	}
	for v, name := range api.LockEvent_Cause_name {
		if v == 0 {
			continue
		}
		want := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "CAUSE_")), "_", "-")
		if got := client.Cause(v).String(); got != want {
			t.Errorf("cause %d: %q, want %q", v, got, want)
		}
	}
}
