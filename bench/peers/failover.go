package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cluster is a system whose leader the failover measurement kills.
type Cluster interface {
	// KillLeader SIGKILLs the member that leads now and returns it.
	KillLeader(ctx context.Context) (*Proc, error)
	// Healthy reports whether every member answers.
	Healthy(ctx context.Context) bool
}

// KillLeader SIGKILLs the fence node whose /leaderz answers 200 (only the
// leader that has taken over does).
func (f *Fence) KillLeader(ctx context.Context) (*Proc, error) {
	i, err := f.leader(ctx)
	if err != nil {
		return nil, err
	}
	f.procs[i].Kill()
	return f.procs[i], nil
}

// LeaderHTTP is the base URL (metrics, pprof) of the leading node's HTTP
// port, and the client to fetch from it with.
func (f *Fence) LeaderHTTP(ctx context.Context) (string, *http.Client, error) {
	i, err := f.leader(ctx)
	if err != nil {
		return "", nil, err
	}
	return f.url(i), f.http, nil
}

// url is node i's HTTP port's base URL.
func (f *Fence) url(i int) string {
	if f.TLS != nil {
		return "https://" + f.metrics[i]
	}
	return "http://" + f.metrics[i]
}

func (f *Fence) leader(ctx context.Context) (int, error) {
	for _, path := range []string{"/leaderz", "/readyz"} { // a fence before /leaderz: /readyz meant the leader
		for i := range f.metrics {
			if httpOK(ctx, f.http, f.url(i)+path) {
				return i, nil
			}
		}
		if path == "/leaderz" && hasPath(ctx, f.http, f.url(0)+path) {
			break // this fence has /leaderz: no leader now
		}
	}
	return 0, errors.New("no fence node is ready as leader")
}

// hasPath reports whether url answers anything but 404 Not Found.
func hasPath(ctx context.Context, hc *http.Client, url string) bool {
	err := Get(ctx, hc, url, io.Discard)
	return err == nil || !strings.Contains(err.Error(), "404")
}

// Healthy reports whether every node's /healthz answers.
func (f *Fence) Healthy(ctx context.Context) bool {
	for i := range f.metrics {
		if !httpOK(ctx, f.http, f.url(i)+"/healthz") {
			return false
		}
	}
	return true
}

// KillLeader SIGKILLs the member that etcd's Status names as leader.
func (e *Etcd) KillLeader(ctx context.Context) (*Proc, error) {
	sts, err := e.statuses(ctx)
	if err != nil {
		return nil, err
	}
	for i, st := range sts {
		if st != nil && st.Leader == st.Header.MemberId {
			e.procs[i].Kill()
			return e.procs[i], nil
		}
	}
	return nil, errors.New("no etcd member reports itself as leader")
}

// Healthy reports whether every member answers Status.
func (e *Etcd) Healthy(ctx context.Context) bool {
	sts, err := e.statuses(ctx)
	return err == nil && !slices.Contains(sts, nil)
}

// statuses asks every member for its Status (nil where it does not answer
// within a second).
func (e *Etcd) statuses(ctx context.Context) ([]*clientv3.StatusResponse, error) {
	cli, err := e.client(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	sts := make([]*clientv3.StatusResponse, len(e.Endpoints))
	for i, ep := range e.Endpoints {
		c, cancel := context.WithTimeout(ctx, time.Second)
		sts[i], _ = cli.Status(c, ep)
		cancel()
	}
	return sts, nil
}

func httpOK(ctx context.Context, hc *http.Client, url string) bool {
	c, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return Get(c, hc, url, io.Discard) == nil
}

// Get fetches url with hc and copies its body to w; anything but 200 is an
// error.
func Get(ctx context.Context, hc *http.Client, url string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// WaitHealthy polls c until every member answers, or fails after limit.
func WaitHealthy(ctx context.Context, c Cluster, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for !c.Healthy(ctx) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cluster not healthy after %v", limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
