package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

// TestDashboardProxy: 'fence dashboard' serves a TLS server's /ui on a
// local plain-HTTP address with the client commands' certificates, so a
// browser without one sees the locks and their events; it answers only
// pages that name it by a loopback address, refuses cross-site writes, and
// stops on its context.
func TestDashboardProxy(t *testing.T) {
	certs := locktest.NewCerts(t)
	srv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	tlsFlags := []string{"--ca", certs.Client.CA, "--cert", certs.Client.Cert, "--key", certs.Client.Key}
	c, err := client.Dial(context.Background(), []string{srv.GRPCAddr()}, client.WithTLSFiles(certs.Client.CA, certs.Client.Cert, certs.Client.Key), client.WithOwner("nightly-host"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TryLock(context.Background(), "jobs/nightly"); err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	out, outW := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		exited <- Run(ctx, append([]string{"dashboard", "--metrics", srv.MetricsAddr(), "--listen", "127.0.0.1:0"}, tlsFlags...),
			strings.NewReader(""), outW, io.Discard)
		outW.Close()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no first line: %v", err)
	}
	go io.Copy(io.Discard, out)
	m := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+)/ui/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first line %q names no address", line)
	}
	base := m[1]

	do := func(method, path, host string, hdr map[string]string, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("GET", "/ui/", "", nil, ""); code != 200 || !strings.Contains(body, "<html") {
		t.Fatalf("the page: %d %.200s", code, body)
	}
	if code, body := do("POST", "/ui/api/v1/ListLocks", "", nil, "{}"); code != 200 || !strings.Contains(body, `"jobs/nightly"`) || !strings.Contains(body, `"nightly-host"`) {
		t.Fatalf("ListLocks through the dashboard: %d %s", code, body)
	}
	if code, body := do("POST", "/ui/api/v1/ListLocks", "rebound.example:7310", nil, "{}"); code != http.StatusForbidden || strings.Contains(body, "jobs/nightly") {
		t.Fatalf("a page that names another host: %d %s", code, body)
	}
	cross := map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}
	if code, _ := do("POST", "/ui/api/v1/ForceRelease", "", cross, `{"name": "jobs/nightly"}`); code != http.StatusForbidden {
		t.Fatalf("a cross-site ForceRelease: %d", code)
	}
	if info, err := c.Status(context.Background(), "jobs/nightly"); err != nil || !info.Held() {
		t.Fatalf("after the refused cross-site call the lock is %+v (%v), want still held", info, err)
	}
	if code, body := do("GET", "/metrics", "", nil, ""); code != http.StatusNotFound {
		t.Fatalf("/metrics through the dashboard: %d %.100s (only /ui/ is passed on)", code, body)
	}

	// The event stream arrives as it happens.
	req, _ := http.NewRequest("GET", base+"/ui/api/watch?prefix=jobs/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("watch: %d %q", resp.StatusCode, ct)
	}
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			events <- sc.Text()
		}
		close(events)
	}()
	if _, err := c.TryLock(context.Background(), "jobs/weekly"); err != nil {
		t.Fatal(err)
	}
	for seen := false; !seen; {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the event stream ended")
			}
			seen = strings.Contains(ev, "jobs/weekly")
		case <-time.After(20 * time.Second):
			t.Fatal("no event for jobs/weekly through the dashboard")
		}
	}

	stop()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("dashboard exited %d when stopped", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("dashboard did not stop with its context (an open event stream kept it)")
	}
}

// TestDashboardListensOnLoopbackOnly: whoever reaches the dashboard acts
// with this machine's certificate, so it refuses any other address.
func TestDashboardListensOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:7310", ":7310", "192.0.2.1:7310"} {
		code, _, errOut := fenceArgs(t, "--insecure", "dashboard", "--listen", addr)
		if code != ExitUsage || !strings.Contains(errOut, "loopback") {
			t.Errorf("--listen %s: exit %d, %q; want a usage error naming loopback", addr, code, errOut)
		}
	}
}
