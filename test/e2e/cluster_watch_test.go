package e2e

import (
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// TestClusterWatchResumesAcrossLeaderKills: a watch follows a lock that a
// worker locks and releases over and over, while the leader — the member
// the watch is on, at first — is killed (SIGKILL) and restarted, twice. The
// watch must report every grant and every release of the worker's, exactly
// once each and in order: the watch moves to another member and resumes
// after the last index it saw.
func TestClusterWatchResumesAcrossLeaderKills(t *testing.T) {
	const cycles, killEvery = 30, 10
	c := newCluster(t, 3, "--lock-delay", "0")
	watcher := c.dial(client.WithOwner("watcher"))
	w, err := watcher.Watch(timeout(t, 2*time.Minute), "watched")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	worker := c.dial(client.WithOwner("worker"), client.WithTTL(30*time.Second))

	var tokens []uint64
	for i := 1; i <= cycles; i++ {
		l, err := worker.Lock(timeout(t, 30*time.Second), "watched")
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		tokens = append(tokens, l.Token())
		if err := l.Release(timeout(t, 30*time.Second)); err != nil {
			t.Fatalf("cycle %d: release: %v", i, err)
		}
		if i%killEvery == 0 && i < cycles {
			old := c.leader()
			old.kill()
			c.leader() // another one leads
			old.startProcess()
			t.Logf("cycle %d: killed and restarted leader %s", i, old.id)
		}
	}

	var lastIndex uint64
	for i, tok := range tokens {
		for _, want := range []client.EventType{client.Granted, client.Released} {
			var e client.LockEvent
			select {
			case got, ok := <-w.Events():
				if !ok {
					t.Fatalf("watch ended after %d cycles: %v", i, w.Err())
				}
				e = got
			case <-time.After(30 * time.Second):
				t.Fatalf("cycle %d: no %s of token %d within 30s", i+1, want, tok)
			}
			if e.Type != want || e.Token != tok || e.Owner != "worker" {
				t.Fatalf("cycle %d: got %s of token %d (%s), want %s of token %d: lost or repeated", i+1, e.Type, e.Token, e.Owner, want, tok)
			}
			if e.Index <= lastIndex {
				t.Fatalf("cycle %d: index %d after %d", i+1, e.Index, lastIndex)
			}
			lastIndex = e.Index
		}
	}
	select {
	case e, ok := <-w.Events():
		if ok {
			t.Fatalf("an event nobody caused: %s of token %d at %d", e.Type, e.Token, e.Index)
		}
	case <-time.After(2 * time.Second):
	}
}
