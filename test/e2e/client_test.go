package e2e

import (
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// TestWaitingLockSurvivesServerKill: a client waits in Lock while the server
// process is killed with SIGKILL and restarted from its data dir. The client
// reconnects and is granted the lock, with a larger token, once the holder
// (whose lease survived the restart) releases it.
func TestWaitingLockSurvivesServerKill(t *testing.T) {
	n := newNode(t, "--lock-delay", "0")
	n.start()
	dial := func(owner string) *client.Client {
		c, err := client.Dial(timeout(t, 5*time.Second), []string{n.grpc}, withTLS(t), client.WithTTL(15*time.Second), client.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter := dial("holder"), dial("waiter")
	held, err := holder.Lock(timeout(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Lease, 1)
	failed := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(timeout(t, 60*time.Second), "x")
		if err != nil {
			failed <- err
			return
		}
		got <- l
	}()
	// Wait until the waiter is queued on the server, then kill the server.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if info, err := holder.Status(timeout(t, time.Second), "x"); err == nil && info.Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("waiter never queued")
		}
	}
	n.kill()
	n.start()
	if err := held.Release(timeout(t, 20*time.Second)); err != nil {
		t.Fatalf("holder's release after the restart: %v", err)
	}
	select {
	case l := <-got:
		if l.Token() <= held.Token() {
			t.Fatalf("waiter's token %d not above the holder's %d", l.Token(), held.Token())
		}
		t.Logf("holder token %d, waiter granted token %d after the server was killed and restarted", held.Token(), l.Token())
	case err := <-failed:
		t.Fatalf("waiting Lock failed across the restart: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("waiter never granted after the restart")
	}
}
