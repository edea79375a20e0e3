package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencehq/fence/client"
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
