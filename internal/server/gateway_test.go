package server_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/policy"
	"github.com/fencehq/fence/internal/server"
)

// gw is an HTTP client of one server's gateway.
type gw struct {
	t    *testing.T
	base string
	hc   *http.Client
}

// startGateway starts a TLS server under testPolicy with its gateway on.
func startGateway(t *testing.T) (*gw, *locktest.Certs) {
	t.Helper()
	certs := locktest.NewCerts(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1)
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.PolicyFile, c.GatewayAddr = file, "127.0.0.1:0" })
	return &gw{t: t, base: "https://" + srv.GatewayAddr()}, certs
}

// as is the gateway reached with identity's client certificate ("" for
// none: then only a bearer token identifies the caller).
func (g *gw) as(certs *locktest.Certs, identity string) *gw {
	g.t.Helper()
	files := certs.Client
	if identity != "" {
		files = certs.Issue(pki.Client, identity, time.Hour)
	}
	cfg, err := pki.ClientTLS(files)
	if err != nil {
		g.t.Fatal(err)
	}
	if identity == "" {
		cfg.Certificates = nil
	}
	return &gw{t: g.t, base: g.base, hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}}
}

// post sends body (JSON) to path with headers h ("Name: value") and
// returns the status and decoded answer.
func (g *gw) post(path, body string, h ...string) (int, map[string]any) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.base+path, strings.NewReader(body))
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
	resp, err := g.hc.Do(req)
	if err != nil {
		g.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		g.t.Fatalf("POST %s: %d, not JSON: %q", path, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// refused checks an error answer: HTTP code, gRPC status name, and a part
// of the message.
func refused(t *testing.T, what string, code int, out map[string]any, wantCode int, wantStatus, msg string) map[string]any {
	t.Helper()
	e, _ := out["error"].(map[string]any)
	if code != wantCode || e == nil || e["status"] != wantStatus || !strings.Contains(fmt.Sprint(e["message"]), msg) {
		t.Fatalf("%s: HTTP %d %v; want %d %s (%q)", what, code, out, wantCode, wantStatus, msg)
	}
	return e
}

// jsonID is a fresh request id as the JSON mapping writes bytes (base64).
func jsonID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// TestGatewayServesTheAPIInJSON: the unary calls and a renewal over
// POST /v1/<call>, with the gRPC port's answers and refusals in JSON.
func TestGatewayServesTheAPIInJSON(t *testing.T) {
	g, certs := startGateway(t)
	alice := g.as(certs, "alice")

	code, lease := alice.post("/v1/CreateLease", `{"request_id": "`+jsonID()+`", "ttl": "30s", "owner": "curl"}`)
	secret, _ := lease["lease_secret"].(string)
	if code != http.StatusOK || secret == "" || lease["lease_number"] != "1" || lease["ttl"] != "30s" {
		t.Fatalf("CreateLease: %d %v", code, lease)
	}
	code, grant := alice.post("/v1/Acquire", `{"request_id": "`+jsonID()+`", "lease_secret": "`+secret+`", "name": "a/job", "seq": 1, "ack": 1}`)
	if code != http.StatusOK || grant["token"] != "1" || grant["name"] != "a/job" {
		t.Fatalf("Acquire: %d %v", code, grant)
	}
	code, info := alice.post("/v1/GetLock", `{"name": "a/job"}`)
	lock, _ := info["lock"].(map[string]any)
	if code != http.StatusOK || lock["holder_lease_number"] != "1" || lock["holder_owner"] != "curl" || lock["token"] != "1" {
		t.Fatalf("GetLock: %d %v", code, info)
	}
	code, renewed := alice.post("/v1/KeepAlive", `{"lease_secret": "`+secret+`", "seq": 7}`)
	if code != http.StatusOK || renewed["ok"] != true || renewed["seq"] != "7" || renewed["ttl"] != "30s" {
		t.Fatalf("KeepAlive by POST: %d %v", code, renewed)
	}

	// A refusal carries the gRPC status and its details, in JSON.
	_, other := alice.post("/v1/CreateLease", `{"request_id": "`+jsonID()+`", "ttl": "30s"}`)
	code, out := alice.post("/v1/Acquire", `{"request_id": "`+jsonID()+`", "lease_secret": "`+other["lease_secret"].(string)+`", "name": "a/job", "seq": 1, "ack": 1}`)
	e := refused(t, "a held lock", code, out, http.StatusConflict, "ABORTED", "is held by lease #1")
	details, _ := e["details"].([]any)
	if len(details) != 1 || details[0].(map[string]any)["@type"] != "type.googleapis.com/fence.v1.LockHeld" || details[0].(map[string]any)["holder_lease_number"] != "1" {
		t.Fatalf("a held lock: details %v, want a LockHeld naming lease 1", details)
	}
	code, out = alice.post("/v1/Acquire?timeout=50ms", `{"request_id": "`+jsonID()+`", "lease_secret": "`+other["lease_secret"].(string)+`", "name": "a/job", "wait": true, "seq": 2, "ack": 1}`)
	refused(t, "a wait past ?timeout=", code, out, http.StatusGatewayTimeout, "DEADLINE_EXCEEDED", "deadline")

	// Bad input: a clear refusal, nothing done.
	for _, c := range []struct{ what, path, body, status, msg string }{
		{"no request id", "/v1/CreateLease", `{"ttl": "30s"}`, "INVALID_ARGUMENT", "request_id is 0 bytes"},
		{"a field of the wrong type", "/v1/GetLock", `{"name": 5}`, "INVALID_ARGUMENT", "not a GetLockRequest in JSON"},
		{"an unknown field", "/v1/GetLock", `{"name": "a/job", "nme": 1}`, "INVALID_ARGUMENT", "unknown field"},
		{"no JSON at all", "/v1/GetLock", `name=a/job`, "INVALID_ARGUMENT", "not a GetLockRequest in JSON"},
		{"a bad lease secret on a renewal", "/v1/KeepAlive", `{"lease_secret": "AQID", "seq": 1}`, "", ""},
		{"a bad timeout", "/v1/GetLock?timeout=forever", `{"name": "a/job"}`, "INVALID_ARGUMENT", "timeout="},
	} {
		code, out := alice.post(c.path, c.body)
		if c.status == "" { // answered like the stream does: ok=false with the error
			if code != http.StatusOK || out["ok"] != false || !strings.Contains(fmt.Sprint(out["error"]), "lease_secret is 3 bytes") {
				t.Fatalf("%s: %d %v", c.what, code, out)
			}
			continue
		}
		refused(t, c.what, code, out, http.StatusBadRequest, c.status, c.msg)
	}
	code, out = alice.post("/v1/Nope", `{}`)
	refused(t, "an unknown call", code, out, http.StatusNotImplemented, "UNIMPLEMENTED", "one of Acquire, AddMember")
	code, out = alice.post("/v1/GetLock", strings.Repeat(" ", 2<<20))
	refused(t, "a body over the limit", code, out, http.StatusBadRequest, "INVALID_ARGUMENT", "at most")
	req, _ := http.NewRequest(http.MethodGet, g.base+"/v1/GetLock", nil)
	resp, err := alice.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Fatalf("GET: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	_, info = alice.post("/v1/GetLock", `{"name": "a/job"}`)
	if lock, _ := info["lock"].(map[string]any); lock["token"] != "1" || lock["waiters"] != float64(0) {
		t.Fatalf("after the refusals a/job is %v, want token 1 held and no waiter", info)
	}
}

// TestGatewayKeepsThePolicy: the gateway judges callers as the gRPC port
// does — by client certificate or bearer token, with the same rights and
// the admin rule.
func TestGatewayKeepsThePolicy(t *testing.T) {
	g, certs := startGateway(t)
	alice, anonymous := g.as(certs, "alice"), g.as(certs, "")

	code, out := alice.post("/v1/GetLock", `{"name": "b/job"}`)
	refused(t, "alice outside her prefix", code, out, http.StatusForbidden, "PERMISSION_DENIED", `has the read right only under`)
	code, out = anonymous.post("/v1/GetLock", `{"name": "jobs/x"}`)
	refused(t, "no certificate, no token", code, out, http.StatusUnauthorized, "UNAUTHENTICATED", "no identity")
	code, out = anonymous.post("/v1/GetLock", `{"name": "jobs/x"}`, "Authorization: Bearer cron-secret")
	if code != http.StatusOK {
		t.Fatalf("cron's token on its prefix: %d %v", code, out)
	}
	code, out = anonymous.post("/v1/GetLock", `{"name": "a/x"}`, "Authorization: Bearer cron-secret")
	refused(t, "cron's token outside its prefix", code, out, http.StatusForbidden, "PERMISSION_DENIED", "")
	code, out = alice.post("/v1/TransferLeader", `{"id": "x"}`)
	refused(t, "an admin call without the admin right", code, out, http.StatusForbidden, "PERMISSION_DENIED", "")

	// Another identity cannot use alice's lease, even with its secret.
	_, lease := alice.post("/v1/CreateLease", `{"request_id": "`+jsonID()+`", "ttl": "30s"}`)
	code, out = g.as(certs, "ops").post("/v1/Acquire", `{"request_id": "`+jsonID()+`", "lease_secret": "`+lease["lease_secret"].(string)+`", "name": "a/job", "seq": 1, "ack": 1}`)
	refused(t, "ops with alice's lease", code, out, http.StatusForbidden, "PERMISSION_DENIED", "only its creator may use it")

}

// TestGatewayOncePer: once_per and record_run in JSON, and the refusal's
// RanRecently detail (HTTP 400, FAILED_PRECONDITION).
func TestGatewayOncePer(t *testing.T) {
	g, certs := startGateway(t)
	alice := g.as(certs, "alice")
	_, lease := alice.post("/v1/CreateLease", `{"request_id": "`+jsonID()+`", "ttl": "30s", "owner": "curl"}`)
	secret, _ := lease["lease_secret"].(string)
	acquire := func(seq string) (int, map[string]any) {
		return alice.post("/v1/Acquire", `{"request_id": "`+jsonID()+`", "lease_secret": "`+secret+`", "name": "a/nightly", "seq": `+seq+`, "ack": `+seq+`, "once_per": "72000s"}`)
	}
	if code, grant := acquire("1"); code != http.StatusOK || grant["token"] != "1" {
		t.Fatalf("Acquire: %d %v", code, grant)
	}
	if code, out := alice.post("/v1/Release", `{"request_id": "`+jsonID()+`", "lease_secret": "`+secret+`", "name": "a/nightly", "seq": 2, "ack": 2, "record_run": true}`); code != http.StatusOK {
		t.Fatalf("Release: %d %v", code, out)
	}
	code, out := acquire("3")
	e := refused(t, "a job that ran", code, out, http.StatusBadRequest, "FAILED_PRECONDITION", `owner "curl"), token 1`)
	details, _ := e["details"].([]any)
	if len(details) != 1 {
		t.Fatalf("details %v, want one RanRecently", details)
	}
	d := details[0].(map[string]any)
	if d["@type"] != "type.googleapis.com/fence.v1.RanRecently" || d["token"] != "1" || d["owner"] != "curl" || d["window"] != "72000s" {
		t.Fatalf("detail %v, want a RanRecently of token 1 by curl, window 72000s", d)
	}
}

// TestGatewaySemaphore: permits in JSON, the slot in the answer, and the
// PermitsMismatch detail of a refusal (HTTP 400, FAILED_PRECONDITION).
func TestGatewaySemaphore(t *testing.T) {
	g, certs := startGateway(t)
	alice := g.as(certs, "alice")
	_, lease := alice.post("/v1/CreateLease", `{"request_id": "`+jsonID()+`", "ttl": "30s", "owner": "curl"}`)
	secret, _ := lease["lease_secret"].(string)
	acquire := func(seq, permits string) (int, map[string]any) {
		return alice.post("/v1/Acquire", `{"request_id": "`+jsonID()+`", "lease_secret": "`+secret+`", "name": "a/pool", "seq": `+seq+`, "ack": `+seq+`, "permits": `+permits+`}`)
	}
	if code, grant := acquire("1", "3"); code != http.StatusOK || grant["token"] != "1" || grant["slot"] != float64(0) {
		t.Fatalf("Acquire: %d %v", code, grant)
	}
	code, out := acquire("2", "4")
	e := refused(t, "another count", code, out, http.StatusBadRequest, "FAILED_PRECONDITION", "a semaphore of 3 permits")
	details, _ := e["details"].([]any)
	if len(details) != 1 {
		t.Fatalf("details %v", details)
	}
	if d := details[0].(map[string]any); d["@type"] != "type.googleapis.com/fence.v1.PermitsMismatch" || d["permits"] != float64(3) || d["asked"] != float64(4) {
		t.Fatalf("detail %v", d)
	}
}

// TestGatewayRelock: release_token in JSON (a uint64: a string or a
// number), and the refusal of a stale one (HTTP 400, FAILED_PRECONDITION).
func TestGatewayRelock(t *testing.T) {
	g, certs := startGateway(t)
	alice := g.as(certs, "alice")
	_, lease := alice.post("/v1/CreateLease", `{"request_id": "`+jsonID()+`", "ttl": "30s", "owner": "curl"}`)
	secret, _ := lease["lease_secret"].(string)
	acquire := func(seq, extra string) (int, map[string]any) {
		return alice.post("/v1/Acquire", `{"request_id": "`+jsonID()+`", "lease_secret": "`+secret+`", "name": "a/loop", "seq": `+seq+`, "ack": `+seq+`, "wait": true`+extra+`}`)
	}
	if code, grant := acquire("1", ""); code != http.StatusOK || grant["token"] != "1" {
		t.Fatalf("Acquire: %d %v", code, grant)
	}
	if code, grant := acquire("2", `, "release_token": "1"`); code != http.StatusOK || grant["token"] != "2" {
		t.Fatalf("relock: %d %v, want token 2", code, grant)
	}
	code, out := acquire("3", `, "release_token": 1`)
	refused(t, "a stale relock", code, out, http.StatusBadRequest, "FAILED_PRECONDITION", "with token 1")
}
