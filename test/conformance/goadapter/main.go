// Command goadapter drives fence's Go client (package client) for the
// conformance suite: commands on stdin, replies and events on stdout, as
// test/conformance/ADAPTER.md says.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fencehq/fence/client"
)

// command is one line of stdin.
type command struct {
	ID        int64  `json:"id"`
	Op        string `json:"op"`
	Name      string `json:"name"`
	TTLms     int64  `json:"ttl_ms"`
	Wait      bool   `json:"wait"`
	TimeoutMs int64  `json:"timeout_ms"`
}

// out writes whole JSON lines to stdout, from any goroutine.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) send(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(append(b, '\n'))
	o.w.Flush()
}

// kind classifies a client error as ADAPTER.md names them.
func kind(err error) string {
	switch {
	case errors.Is(err, client.ErrLocked):
		return "locked"
	case errors.Is(err, client.ErrRevoked):
		return "revoked"
	case errors.Is(err, client.ErrExpired):
		return "expired"
	case errors.Is(err, client.ErrInvalid):
		return "invalid"
	case errors.Is(err, client.ErrUnreachable):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other"
}

type adapter struct {
	out     *out
	servers []string
	clients map[time.Duration]*client.Client // one per TTL
	held    map[string]*client.Lease
}

func (a *adapter) clientFor(ttl time.Duration) (*client.Client, error) {
	if c := a.clients[ttl]; c != nil {
		return c, nil
	}
	opts := []client.Option{client.WithTTL(ttl), client.WithOwner("conformance-go")}
	if os.Getenv("FENCE_INSECURE") == "1" {
		opts = append(opts, client.WithInsecure())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, a.servers, opts...)
	if err != nil {
		return nil, err
	}
	a.clients[ttl] = c
	return c, nil
}

func (a *adapter) do(cmd command) map[string]any {
	fail := func(err error) map[string]any {
		return map[string]any{"ok": false, "error": err.Error(), "kind": kind(err)}
	}
	switch cmd.Op {
	case "lock":
		c, err := a.clientFor(time.Duration(cmd.TTLms) * time.Millisecond)
		if err != nil {
			return fail(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cmd.TimeoutMs)*time.Millisecond)
		defer cancel()
		lock := c.TryLock
		if cmd.Wait {
			lock = c.Lock
		}
		l, err := lock(ctx, cmd.Name)
		if err != nil {
			return fail(err)
		}
		a.held[cmd.Name] = l
		go func() {
			<-l.Done()
			if err := l.Err(); err != nil && !errors.Is(err, client.ErrReleased) && !errors.Is(err, client.ErrClosed) {
				a.out.send(map[string]any{"event": "ended", "name": cmd.Name, "kind": kind(err), "error": err.Error()})
			}
		}()
		return map[string]any{"ok": true, "token": l.Token(), "lease_number": l.LeaseNumber()}
	case "status":
		l := a.held[cmd.Name]
		if l == nil || l.Err() != nil {
			return map[string]any{"ok": true, "held": false, "deadline_left_ms": 0, "jeopardy": false}
		}
		left := max(0, time.Until(l.Deadline()).Milliseconds())
		return map[string]any{"ok": true, "held": true, "deadline_left_ms": left, "jeopardy": l.Jeopardy() != nil}
	case "release":
		l := a.held[cmd.Name]
		if l == nil {
			return fail(fmt.Errorf("%w: %q is not held here", client.ErrInvalid, cmd.Name))
		}
		delete(a.held, cmd.Name)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Release(ctx); err != nil {
			return fail(err)
		}
		return map[string]any{"ok": true}
	case "close":
		var errs []error
		for _, c := range a.clients {
			errs = append(errs, c.Close())
		}
		if err := errors.Join(errs...); err != nil {
			return fail(err)
		}
		return map[string]any{"ok": true}
	}
	return fail(fmt.Errorf("%w: unknown op %q", client.ErrInvalid, cmd.Op))
}

func main() {
	a := &adapter{out: &out{w: bufio.NewWriter(os.Stdout)}, servers: strings.Split(os.Getenv("FENCE_SERVERS"), ","),
		clients: map[time.Duration]*client.Client{}, held: map[string]*client.Lease{}}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			fmt.Fprintf(os.Stderr, "goadapter: bad command %q: %v\n", in.Text(), err)
			os.Exit(2)
		}
		reply := a.do(cmd)
		reply["id"] = cmd.ID
		a.out.send(reply)
		if cmd.Op == "close" {
			return
		}
	}
}
