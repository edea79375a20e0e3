package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/policy"
	"github.com/fencehq/fence/internal/server"
)

// TestDashboardReadsRefuseRebinding: on a plaintext node without a policy
// (the dev node, its metrics port on loopback), a web page whose own name
// was made to resolve to 127.0.0.1 (DNS rebinding) is same-origin to the
// dashboard, so the browser lets it read the answers. It must not read the
// lock table, a lock, the members or the event stream (names, owners and
// fenced values): the dashboard's data calls from this machine must name
// it by address or as localhost, as force-release already must. The page
// opened at 127.0.0.1 still reads everything.
func TestDashboardReadsRefuseRebinding(t *testing.T) {
	srv := locktest.Start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithInsecure(), client.WithOwner("payroll-app"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.TryLock(ctx, "secret/payroll"); err != nil {
		t.Fatal(err)
	}
	local := &gw{t: t, base: "http://" + srv.MetricsAddr(), hc: &http.Client{Timeout: 10 * time.Second}}
	for _, rebound := range []string{"Host: rebind.attacker.example:7301", "Host: 127.0.0.1.nip.io:7301", "Host: localhost.attacker.example", "Host: localhost.:7301", "Host: [::1].example"} {
		for _, c := range []struct{ path, body string }{
			{"/ui/api/v1/ListLocks", `{}`},
			{"/ui/api/v1/GetLock", `{"name": "secret/payroll"}`},
			{"/ui/api/v1/Members", `{}`},
			{"/ui/api/may/GetLock", `{"name": "secret/payroll"}`},
		} {
			code, out := local.post(c.path, c.body, rebound)
			refused(t, c.path+" with "+rebound, code, out, http.StatusForbidden, "PERMISSION_DENIED", "loopback address")
		}
		if code, _ := local.watchEvents("prefix=", rebound); code != http.StatusForbidden {
			t.Fatalf("the event stream with %s: HTTP %d, want 403", rebound, code)
		}
	}
	// The page at a loopback address, or localhost, reads as before.
	for _, host := range [][]string{nil, {"Host: localhost:7301"}, {"Host: [::1]:7301"}, {"Host: LOCALHOST"}} {
		code, out := local.post("/ui/api/v1/GetLock", `{"name": "secret/payroll"}`, host...)
		if lock, _ := out["lock"].(map[string]any); code != http.StatusOK || lock["holder_owner"] != "payroll-app" {
			t.Fatalf("GetLock with %q: %d %v", host, code, out)
		}
	}
	if code, _ := local.watchEvents("prefix="); code != http.StatusOK {
		t.Fatalf("the event stream from 127.0.0.1: HTTP %d, want 200", code)
	}
}

// TestDashboardForceReleaseRefusesCrossSite: on a plaintext loopback node
// without an admin token or a policy (where the loopback admin rule admits
// the operator's browser), another site's page cannot force-release
// through the dashboard's API: not by a GET (an <img>), not by a simple
// cross-site POST (a form or a text/plain fetch, sent without a
// preflight), not by a POST that carries only an Origin. The page itself
// (same-origin) can.
func TestDashboardForceReleaseRefusesCrossSite(t *testing.T) {
	srv := locktest.Start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithInsecure(), client.WithOwner("db-migrator"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l, err := cl.TryLock(ctx, "prod/db")
	if err != nil {
		t.Fatal(err)
	}
	local := &gw{t: t, base: "http://" + srv.MetricsAddr(), hc: &http.Client{Timeout: 10 * time.Second}}
	body := func() string {
		return `{"name": "prod/db", "token": "` + fmt.Sprint(l.Token()) + `", "reason": "csrf", "request_id": "` + jsonID() + `"}`
	}
	held := func() bool {
		_, out := local.post("/ui/api/v1/GetLock", `{"name": "prod/db"}`)
		lock, _ := out["lock"].(map[string]any)
		return lock["token"] == fmt.Sprint(l.Token())
	}
	resp, err := local.hc.Get(local.base + "/ui/api/v1/ForceRelease?name=prod/db&token=" + fmt.Sprint(l.Token()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || !held() {
		t.Fatalf("GET ForceRelease: HTTP %d, held %v; want 405 and the lock still held", resp.StatusCode, held())
	}
	for _, h := range [][]string{
		{"Content-Type: text/plain;charset=UTF-8", "Origin: https://evil.example", "Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors"},
		{"Content-Type: application/x-www-form-urlencoded", "Origin: https://evil.example"},
		{"Content-Type: text/plain", "Origin: http://localhost:1", "Sec-Fetch-Site: same-site"}, // another local service's page
	} {
		if code := rawPost(t, local, "/ui/api/v1/ForceRelease", body(), h); code != http.StatusForbidden || !held() {
			t.Fatalf("a cross-site POST (%v): HTTP %d, held %v; want 403 and the lock still held", h, code, held())
		}
		if code := rawPost(t, local, "/ui/api/may/ForceRelease", body(), h); code != http.StatusForbidden {
			t.Fatalf("a cross-site question (%v): HTTP %d, want 403", h, code)
		}
	}
	code, out := local.post("/ui/api/v1/ForceRelease", body(), "Content-Type: application/json", "Origin: http://"+srv.MetricsAddr(), "Sec-Fetch-Site: same-origin")
	if code != http.StatusOK || held() {
		t.Fatalf("the dashboard's own POST: HTTP %d %v, held %v; want 200 and the lock released", code, out, held())
	}
}

// rawPost posts body to path with headers h and returns the HTTP status
// (the cross-origin check answers in plain text).
func rawPost(t *testing.T, g *gw, path, body string, h []string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range h {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Add(k, v)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDashboardWatchFollowsAPolicyReload: the dashboard's event stream,
// opened under one policy, is judged by the policy in force at each event:
// after a reload that moves cron's read right from jobs/ to other/, the
// open stream shows other/'s grants and no longer jobs/'s.
func TestDashboardWatchFollowsAPolicyReload(t *testing.T) {
	doc := strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1)
	pc := startWithPolicy(t, doc, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	g := &gw{t: t, base: "https://" + pc.srv.MetricsAddr()}
	code, next := g.as(pc.certs, "").watchEvents("prefix=", "Authorization: Bearer cron-secret")
	if code != http.StatusOK {
		t.Fatalf("cron's watch: HTTP %d", code)
	}
	next() // the start mark
	if err := os.WriteFile(pc.policy, []byte(strings.Replace(doc, "prefixes: [jobs/]", "prefixes: [other/]", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := pc.srv.ReloadPolicy(); err != nil {
		t.Fatal(err)
	}
	ops := pc.as("ops")
	hidden, err := ops.Lock(t.Context(), "jobs/after-reload")
	if err != nil {
		t.Fatal(err)
	}
	shown, err := ops.Lock(t.Context(), "other/x")
	if err != nil {
		t.Fatal(err)
	}
	for {
		m := next()
		if m == nil {
			t.Fatal("the watch ended before other/x's grant")
		}
		evs, _ := m["events"].([]any)
		if len(evs) == 0 {
			continue
		}
		e := evs[0].(map[string]any)
		if e["name"] == "jobs/after-reload" {
			t.Fatalf("after the reload cron's open stream showed jobs/after-reload (token %d): %v", hidden.Token(), m)
		}
		if e["name"] == "other/x" && e["token"] == fmt.Sprint(shown.Token()) {
			break
		}
	}
}

// TestDashboardQuestionWithABadTokenIsAudited: /ui/api/may answers a
// question of the page, whose refusal is not a refused call. But a
// question carrying a token the policy does not know (or no identity) is
// no question of a dashboard user: it is a probe, and must be counted,
// logged and audited like any call without an identity — else anyone can
// try leaked or guessed tokens there, and learn which still work, unseen.
// A known identity's question that the policy refuses is still not audited.
func TestDashboardQuestionWithABadTokenIsAudited(t *testing.T) {
	pc := startWithPolicy(t, strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1),
		func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	anonymous := (&gw{t: t, base: "https://" + pc.srv.MetricsAddr()}).as(pc.certs, "")
	const method = `"method":"/fence.v1.FenceService/ForceRelease"`
	for _, token := range []string{"stolen-guess-1", "stolen-guess-2"} {
		code, out := anonymous.post("/ui/api/may/ForceRelease", `{"name": "jobs/x"}`, "Authorization: Bearer "+token)
		refused(t, "a question with an unknown token", code, out, http.StatusUnauthorized, "UNAUTHENTICATED", "not one the policy knows")
	}
	if n := auditLines(t, pc.audit, `"code":"Unauthenticated"`); n != 2 {
		t.Fatalf("two questions with unknown tokens: %d audit lines, want 2 (probes go unseen)", n)
	}
	code, out := anonymous.post("/ui/api/may/ForceRelease", `{"name": "jobs/x"}`, "Authorization: Bearer cron-secret")
	refused(t, "cron's question", code, out, http.StatusForbidden, "PERMISSION_DENIED", "admin right")
	if n := auditLines(t, pc.audit, `"code":"PermissionDenied"`); n != 0 {
		t.Fatalf("cron's refused question: %d audit lines, want none (a question, not a call)", n)
	}
	if n := auditLines(t, pc.audit, method); n != 2 {
		t.Fatalf("%d ForceRelease lines in the audit file, want 2", n)
	}
}

// TestMetricsPrefixesKeepThePolicy: the per-prefix series name lock-name
// prefixes, which a policy keeps from callers without the read right on
// them (ListLocks, Watch, HotLocks and the dashboard filter them). On the
// HTTPS port, which asks for no client certificate, /metrics serves them
// only to a scraper with a certificate of the cluster's CA (as the
// dashboard's data), and under a policy only the prefixes its identity may
// read ("(none)" and "(other)" count names of every prefix: they need the
// read right on every name). The other series are served to anyone.
func TestMetricsPrefixesKeepThePolicy(t *testing.T) {
	pc := startWithPolicy(t, strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1),
		func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	ctx := t.Context()
	for identity, name := range map[string]string{"ops": "secret/payroll", "alice": "a/report"} {
		l, err := pc.as(identity).TryLock(ctx, name)
		if err == nil {
			err = l.Release(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	g := &gw{t: t, base: "https://" + pc.srv.MetricsAddr()}
	scrape := func(as *gw, h ...string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, g.base+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range h {
			k, v, _ := strings.Cut(kv, ": ")
			req.Header.Add(k, v)
		}
		resp, err := as.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "fence_grants_total 2") {
			t.Fatalf("/metrics: HTTP %d, no fence_grants_total 2:\n%.500s", resp.StatusCode, b)
		}
		return string(b)
	}
	for _, c := range []struct {
		who      string
		body     string
		shown    []string
		notShown []string
	}{
		{"no certificate", scrape(g.as(pc.certs, "")), nil, []string{`prefix="secret/"`, `prefix="a/"`, `prefix="(none)"`}},
		{"an unknown token", scrape(g.as(pc.certs, ""), "Authorization: Bearer guess"), nil, []string{`prefix="secret/"`, `prefix="a/"`}},
		{"alice (a/)", scrape(g.as(pc.certs, "alice")), []string{`fence_lock_hold_seconds_count{cause="released",prefix="a/"} 1`}, []string{`prefix="secret/"`, `prefix="(none)"`}},
		{"cron's token (jobs/)", scrape(g.as(pc.certs, ""), "Authorization: Bearer cron-secret"), nil, []string{`prefix="secret/"`, `prefix="a/"`}},
		{"ops (every name)", scrape(g.as(pc.certs, "ops")), []string{`prefix="secret/"`, `prefix="a/"`, `prefix="(none)"`}, nil},
	} {
		for _, s := range c.shown {
			if !strings.Contains(c.body, s) {
				t.Errorf("/metrics for %s lacks %s", c.who, s)
			}
		}
		for _, s := range c.notShown {
			if strings.Contains(c.body, s) {
				t.Errorf("/metrics for %s shows %s", c.who, s)
			}
		}
	}

	// TLS without a policy: a client certificate, as for the dashboard's data.
	certs := locktest.NewCerts(t)
	srv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	cl, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithTLSFiles(certs.Client.CA, certs.Client.Cert, certs.Client.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, name := range []string{"secret/payroll", "x"} {
		l, err := cl.TryLock(ctx, name)
		if err == nil {
			err = l.Release(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	g = &gw{t: t, base: "https://" + srv.MetricsAddr()}
	if body := scrape(g.as(certs, "")); strings.Contains(body, `prefix="secret/"`) {
		t.Error("/metrics without a certificate (TLS, no policy) shows the prefix secret/")
	}
	if body := scrape(g.as(certs, "anyone")); !strings.Contains(body, `prefix="secret/"`) {
		t.Error("/metrics with a certificate (TLS, no policy) lacks the prefix secret/")
	}
}
