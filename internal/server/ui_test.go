package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/policy"
	"github.com/fencehq/fence/internal/server"
)

// auditLines counts the audit file's lines that contain s.
func auditLines(t *testing.T, file, s string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}

// watchEvents opens /ui/api/watch as g with headers h and returns the
// HTTP status and, for 200, a function that reads the next data message
// (nil at the end of the stream).
func (g *gw) watchEvents(query string, h ...string) (int, func() map[string]any) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	g.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/ui/api/watch?"+query, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, kv := range h {
		k, v, _ := strings.Cut(kv, ": ")
		if k == "Host" {
			req.Host = v // (a Host header is not sent)
			continue
		}
		req.Header.Add(k, v)
	}
	resp, err := (&http.Client{Transport: g.hc.Transport}).Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		g.t.Fatalf("watch: Content-Type %q, want text/event-stream", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	return resp.StatusCode, func() map[string]any {
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					g.t.Fatalf("watch: %q: %v", data, err)
				}
				return m
			}
		}
		return nil
	}
}

// TestDashboardAPIKeepsThePolicy: the dashboard's data calls on the
// metrics port are judged as the gRPC calls they stand for. Without an
// identity nothing is read; a reader sees only its prefixes, in the table
// and in the event stream; force-release (and the question whether one
// may) needs the admin right; a known identity's question that is refused
// is not recorded as a refused call; calls the dashboard does not make are
// not served.
func TestDashboardAPIKeepsThePolicy(t *testing.T) {
	pc := startWithPolicy(t, strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1),
		func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	g := &gw{t: t, base: "https://" + pc.srv.MetricsAddr()}
	anonymous, alice, ops := g.as(pc.certs, ""), g.as(pc.certs, "alice"), g.as(pc.certs, "ops")
	cron := "Authorization: Bearer cron-secret"

	// No identity: no table, no stream, no question answered.
	code, out := anonymous.post("/ui/api/v1/ListLocks", `{}`)
	refused(t, "ListLocks without an identity", code, out, http.StatusUnauthorized, "UNAUTHENTICATED", "no identity")
	if code, _ := anonymous.watchEvents("prefix="); code != http.StatusUnauthorized {
		t.Fatalf("watch without an identity: HTTP %d, want 401", code)
	}
	code, out = anonymous.post("/ui/api/may/ForceRelease", `{"name": "jobs/x"}`)
	refused(t, "may ForceRelease without an identity", code, out, http.StatusUnauthorized, "UNAUTHENTICATED", "no identity")

	// cron (a token, read on jobs/) watches everything it may see.
	code, next := anonymous.watchEvents("prefix=", cron)
	if code != http.StatusOK {
		t.Fatalf("cron's watch: HTTP %d", code)
	}
	if first := next(); first == nil || first["index"] == nil {
		t.Fatalf("the watch's first message %v, want a progress mark", first)
	}
	opsClient := pc.as("ops")
	ctx := t.Context()
	hidden, err := opsClient.Lock(ctx, "a/secret")
	if err != nil {
		t.Fatal(err)
	}
	shown, err := opsClient.Lock(ctx, "jobs/nightly")
	if err != nil {
		t.Fatal(err)
	}
	for {
		m := next()
		if m == nil {
			t.Fatal("the watch ended before jobs/nightly's grant")
		}
		evs, _ := m["events"].([]any)
		if len(evs) == 0 {
			continue
		}
		e := evs[0].(map[string]any)
		if e["name"] == "a/secret" {
			t.Fatalf("cron's watch showed a/secret (token %d), outside its prefix: %v", hidden.Token(), m)
		}
		if e["name"] == "jobs/nightly" && e["type"] == "TYPE_GRANTED" && e["token"] == fmt.Sprint(shown.Token()) {
			break
		}
	}

	// cron's table holds its names only; a lock outside them is refused.
	code, out = anonymous.post("/ui/api/v1/ListLocks", `{}`, cron)
	if code != http.StatusOK {
		t.Fatalf("cron's ListLocks: %d %v", code, out)
	}
	if locks, _ := out["locks"].([]any); len(locks) != 1 || locks[0].(map[string]any)["name"] != "jobs/nightly" {
		t.Fatalf("cron's table %v, want jobs/nightly alone", out["locks"])
	}
	code, out = alice.post("/ui/api/v1/GetLock", `{"name": "jobs/nightly"}`)
	refused(t, "alice reads outside her prefix", code, out, http.StatusForbidden, "PERMISSION_DENIED", "has the read right only under")

	// Force-release needs the admin right, asked or done; the question is
	// not recorded, the call is.
	body := `{"name": "jobs/nightly", "token": "` + fmt.Sprint(shown.Token()) + `", "reason": "test", "request_id": "` + jsonID() + `"}`
	code, out = anonymous.post("/ui/api/may/ForceRelease", body, cron)
	refused(t, "may cron force-release", code, out, http.StatusForbidden, "PERMISSION_DENIED", "admin right")
	cronForces := `"method":"/fence.v1.FenceService/ForceRelease","identity":"cron"`
	if n := auditLines(t, pc.audit, cronForces); n != 0 {
		t.Fatalf("the question was audited as a refused call (%d lines)", n)
	}
	code, out = anonymous.post("/ui/api/v1/ForceRelease", body, cron)
	refused(t, "cron force-releases", code, out, http.StatusForbidden, "PERMISSION_DENIED", "admin right")
	if n := auditLines(t, pc.audit, cronForces); n != 1 {
		t.Fatalf("the refused ForceRelease: %d audit lines, want 1", n)
	}
	code, out = ops.post("/ui/api/v1/GetLock", `{"name": "jobs/nightly"}`)
	if lock, _ := out["lock"].(map[string]any); code != http.StatusOK || lock["token"] != fmt.Sprint(shown.Token()) {
		t.Fatalf("after the refused force-release: %d %v, want jobs/nightly still held with token %d", code, out, shown.Token())
	}
	if code, out = ops.post("/ui/api/may/ForceRelease", body); code != http.StatusOK || out["allowed"] != true {
		t.Fatalf("may ops force-release: %d %v", code, out)
	}
	if code, out = ops.post("/ui/api/v1/ForceRelease", body); code != http.StatusOK || out["revoked_owner"] != "ops" {
		t.Fatalf("ops force-releases: %d %v", code, out)
	}

	// The dashboard's calls only.
	code, out = ops.post("/ui/api/v1/TransferLeader", `{}`)
	refused(t, "TransferLeader through the dashboard", code, out, http.StatusNotImplemented, "UNIMPLEMENTED", "the dashboard makes only")
	code, out = ops.post("/ui/api/may/Acquire", `{}`)
	refused(t, "may Acquire", code, out, http.StatusNotImplemented, "UNIMPLEMENTED", "the dashboard makes only")
}

// TestDashboardAPIWithoutAPolicy: with TLS and no policy the dashboard's
// data needs a client certificate, as the gRPC port does (the metrics port
// itself does not ask for one: Prometheus scrapes it); the page and
// /ui/api/stats need none. On plaintext without an admin token, the
// loopback admin rule admits a force-release only to a page that names
// this machine (no DNS rebinding).
func TestDashboardAPIWithoutAPolicy(t *testing.T) {
	certs := locktest.NewCerts(t)
	srv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	g := &gw{t: t, base: "https://" + srv.MetricsAddr()}
	anonymous, holder := g.as(certs, ""), g.as(certs, "ops")
	code, out := anonymous.post("/ui/api/v1/ListLocks", `{}`)
	refused(t, "ListLocks without a certificate", code, out, http.StatusUnauthorized, "UNAUTHENTICATED", "client certificate")
	if code, _ := anonymous.watchEvents("prefix="); code != http.StatusUnauthorized {
		t.Fatalf("watch without a certificate: HTTP %d, want 401", code)
	}
	if code, out = holder.post("/ui/api/v1/ListLocks", `{}`); code != http.StatusOK {
		t.Fatalf("ListLocks with a certificate: %d %v", code, out)
	}
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/api/stats"} {
		resp, err := anonymous.hc.Get(g.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s without a certificate: %d, want 200", path, resp.StatusCode)
		}
	}

	plain := locktest.Start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	local := &gw{t: t, base: "http://" + plain.MetricsAddr(), hc: &http.Client{Timeout: 10 * time.Second}}
	if code, out = local.post("/ui/api/may/ForceRelease", `{"name": "x"}`); code != http.StatusOK {
		t.Fatalf("may force-release from loopback: %d %v", code, out)
	}
	code, out = local.post("/ui/api/may/ForceRelease", `{"name": "x"}`, "Host: fence.example.com:9090")
	refused(t, "may force-release through another name", code, out, http.StatusForbidden, "PERMISSION_DENIED", "loopback address")
	code, out = local.post("/ui/api/v1/ForceRelease", `{"name": "x", "token": "1"}`, "Host: fence.example.com")
	refused(t, "force-release through another name", code, out, http.StatusForbidden, "PERMISSION_DENIED", "loopback address")
}
