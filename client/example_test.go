package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// exampleServer starts a real single-node server in a temp dir for the
// examples, serving TLS with the dev certificates it creates there (as
// `fence serve` does), and returns its address, the client certificate's
// files and a stop func.
func exampleServer() (string, pki.Files, func()) {
	dir, _ := os.MkdirTemp("", "fence-example")
	cfg := locktest.Config(dir)
	cfg.Insecure = false
	srv, err := locktest.Run(cfg)
	if err != nil {
		panic(err)
	}
	return srv.GRPCAddr(), pki.ClientFiles(server.DevTLSDir(dir)), func() { srv.Close(); os.RemoveAll(dir) }
}

// Run a job once across a fleet: Do waits for the lock, runs the function
// with the fencing token, and releases.
func ExampleClient_Do() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, []string{addr}, client.WithTLSFiles(certs.CA, certs.Cert, certs.Key), client.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	err = c.Do(ctx, "jobs/nightly-report", func(ctx context.Context, token uint64) error {
		// Pass token to every write, e.g.
		// UPDATE report SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2
		fmt.Println("running the nightly report with token", token)
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// running the nightly report with token 1
	// done: <nil>
}

// A worker that takes the same lock again and again: Relock releases the
// grant and joins the queue in one step, so workers already waiting go
// first, and each turn is one log entry instead of two. Each turn has a
// new, larger token.
func ExampleLease_Relock() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, []string{addr}, client.WithTLSFiles(certs.CA, certs.Cert, certs.Key))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	l, err := c.Lock(ctx, "queues/orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	for turn := 1; turn <= 3; turn++ {
		fmt.Println("turn", turn, "with token", l.Token())
		// ... take a batch from the queue, writing with l.Token() ...
		if turn == 3 {
			break
		}
		if l, err = l.Relock(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("release:", l.Release(ctx))
	// Output:
	// turn 1 with token 1
	// turn 2 with token 2
	// turn 3 with token 3
	// release: <nil>
}

// Run a job at most once a day across a fleet: every host runs the same
// code on its own schedule, and only the first one in the window runs the
// job; the others learn who ran it. A run that fails records nothing, so
// the next host tries again.
func ExampleWithOncePer() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	tls := client.WithTLSFiles(certs.CA, certs.Cert, certs.Key)
	for _, host := range []string{"host-a", "host-b"} {
		c, err := client.Dial(ctx, []string{addr}, tls, client.WithOwner(host))
		if err != nil {
			fmt.Println(err)
			return
		}
		err = c.Do(ctx, "jobs/nightly-report", func(ctx context.Context, token uint64) error {
			fmt.Println(host, "runs the nightly report with token", token)
			return nil // success: the run is recorded as the lock is released
		}, client.WithOncePer(20*time.Hour))
		var ran *client.RanError
		if errors.As(err, &ran) {
			fmt.Printf("%s skips it: %s ran it with token %d\n", host, ran.HolderOwner, ran.Token)
		}
		c.Close()
	}
	// Output:
	// host-a runs the nightly report with token 1
	// host-b skips it: host-a ran it with token 1
}

// TryLock says at once who holds a lock.
func ExampleClient_TryLock() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	tls := client.WithTLSFiles(certs.CA, certs.Cert, certs.Key)
	alice, _ := client.Dial(ctx, []string{addr}, tls, client.WithOwner("alice"))
	defer alice.Close()
	bob, _ := client.Dial(ctx, []string{addr}, tls, client.WithOwner("bob"))
	defer bob.Close()

	lease, err := alice.TryLock(ctx, "leader")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("alice leads with token", lease.Token())

	_, err = bob.TryLock(ctx, "leader")
	var held *client.LockedError
	if errors.As(err, &held) {
		fmt.Printf("bob: %s holds it with token %d\n", held.HolderOwner, held.Token)
	}

	lease.Release(ctx)
	lease, err = bob.TryLock(ctx, "leader")
	fmt.Println("bob leads with token", lease.Token(), err)
	// Output:
	// alice leads with token 1
	// bob: alice holds it with token 1
	// bob leads with token 2 <nil>
}

// A holder watches its lease while it works and stops when it ends.
func ExampleLease_Done() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	c, _ := client.Dial(ctx, []string{addr}, client.WithTLSFiles(certs.CA, certs.Cert, certs.Key))
	defer c.Close()

	lease, _ := c.Lock(ctx, "compactor")
	go func() {
		time.Sleep(10 * time.Millisecond)
		lease.Release(ctx) // in real life: a pause, a network cut, an expiry
	}()
	select {
	case <-lease.Done():
		fmt.Println("stopped:", lease.Err())
	case <-time.After(10 * time.Second):
		fmt.Println("still working")
	}
	// Output:
	// stopped: fence: lock released
}

// Watch a lock instead of polling it: each change arrives with the raft
// index it was applied at.
func ExampleClient_Watch() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, []string{addr}, client.WithTLSFiles(certs.CA, certs.Cert, certs.Key), client.WithOwner("report-host"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	w, err := c.Watch(ctx, "jobs/", client.WatchPrefix())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()

	lease, err := c.Lock(ctx, "jobs/nightly-report")
	if err != nil {
		fmt.Println(err)
		return
	}
	lease.Release(ctx)

	for range 2 {
		e := <-w.Events()
		line := fmt.Sprintf("%s %s: lease #%d (%s), token %d", e.Type, e.Name, e.Lease, e.Owner, e.Token)
		if e.Cause != 0 {
			line += ", " + e.Cause.String()
		}
		fmt.Println(line)
	}
	// Output:
	// granted jobs/nightly-report: lease #1 (report-host), token 1
	// released jobs/nightly-report: lease #1 (report-host), token 1, released
}

// Elect a leader: Campaign waits for the leadership and proclaims a value
// (here the leader's address); everyone else finds the leader with Leader,
// or follows the changes with Observe. The leader passes its Token to every
// write, like any lock holder.
func ExampleClient_Campaign() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	dial := func(owner string) *client.Client {
		c, err := client.Dial(ctx, []string{addr}, client.WithTLSFiles(certs.CA, certs.Cert, certs.Key), client.WithOwner(owner))
		if err != nil {
			panic(err)
		}
		return c
	}
	a, b := dial("host-a"), dial("host-b")
	defer a.Close()
	defer b.Close()

	leading, err := a.Campaign(ctx, "services/billing", "10.0.0.1:8080")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("host-a leads with token", leading.Token())

	obs, err := b.Observe(ctx, "services/billing")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer obs.Close()
	l := <-obs.Leaders()
	fmt.Printf("host-b sees %s at %s (token %d)\n", l.Owner, l.Value, l.Token)

	next := make(chan *client.Leadership)
	go func() {
		ld, err := b.Campaign(ctx, "services/billing", "10.0.0.2:8080") // waits its turn
		if err != nil {
			fmt.Println(err)
		}
		next <- ld
	}()
	leading.Resign(ctx)
	<-next
	l = <-obs.Leaders()
	fmt.Printf("host-b sees %s at %s (token %d)\n", l.Owner, l.Value, l.Token)
	// Output:
	// host-a leads with token 1
	// host-b sees host-a at 10.0.0.1:8080 (token 1)
	// host-b sees host-b at 10.0.0.2:8080 (token 2)
}

// Run at most two exports at once: each holder gets a permit with its own
// fencing token and a slot, and fences the storage row of its slot (here
// the server's fenced key "exports/<slot>"; in SQL, a row per slot with
// UPDATE … WHERE slot = $1 AND fence <= $2).
func ExampleClient_Semaphore() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, []string{addr}, client.WithTLSFiles(certs.CA, certs.Cert, certs.Key), client.WithOwner("worker"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	exports := c.Semaphore("exports", 2)
	var held []*client.Lease
	for range 2 {
		l, err := exports.Acquire(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		key := fmt.Sprintf("exports/%d", l.Slot())
		fmt.Printf("permit in slot %d, token %d: write %s: %v\n", l.Slot(), l.Token(), key, c.Put(ctx, key, []byte("running"), l.Token()))
		held = append(held, l)
	}
	_, err = exports.TryAcquire(ctx)
	fmt.Println("a third:", errors.Is(err, client.ErrLocked))

	_, err = c.Semaphore("exports", 3).TryAcquire(ctx)
	fmt.Println("another count:", errors.Is(err, client.ErrPermits))

	held[0].Release(ctx)
	l, _ := exports.TryAcquire(ctx)
	fmt.Printf("the freed slot %d, token %d\n", l.Slot(), l.Token())
	// Output:
	// permit in slot 0, token 1: write exports/0: <nil>
	// permit in slot 1, token 2: write exports/1: <nil>
	// a third: true
	// another count: true
	// the freed slot 0, token 3
}

// Readers share a read-write lock, a writer holds it alone, and the
// writer's token is larger than every reader's before it: a fenced write
// of a reader that is still running after the writer got in is refused.
func ExampleClient_RWLock() {
	addr, certs, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, []string{addr}, client.WithTLSFiles(certs.CA, certs.Cert, certs.Key))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	rw := c.RWLock("catalog")
	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx)
	fmt.Println("readers with tokens", r1.Token(), r2.Token())
	_, err = rw.TryLock(ctx)
	fmt.Println("a writer while they read:", errors.Is(err, client.ErrLocked))

	r1.Release(ctx)
	r2.Release(ctx)
	w, _ := rw.Lock(ctx)
	fmt.Println("writer with token", w.Token(), c.Put(ctx, "catalog", []byte("v2"), w.Token()))

	// A reader paused past its lease wakes up and writes (a cache fill, say):
	err = c.Put(ctx, "catalog", []byte("v1 from cache"), r1.Token())
	fmt.Println("the reader's stale write refused:", errors.Is(err, fencing.ErrStale))
	// Output:
	// readers with tokens 1 2
	// a writer while they read: true
	// writer with token 3 <nil>
	// the reader's stale write refused: true
}
