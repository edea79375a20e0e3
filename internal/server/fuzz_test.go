package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"testing"
	"time"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// FuzzRequestValidation drives the API boundary: wire bytes decoded as each
// mutating request, and raw field values that a client library in another
// language could send. Validation must never panic, must refuse with
// InvalidArgument, and whatever it accepts must be a command the fsm accepts.
func FuzzRequestValidation(f *testing.F) {
	l := limits{minTTL: time.Second, maxTTL: time.Hour, lockDelay: 5 * time.Second}
	seed, _ := proto.Marshal(&api.AcquireRequest{RequestId: make([]byte, 16), LeaseSecret: []byte("0123456789abcdef"), Name: "jobs/nightly", Wait: true})
	f.Add(seed, "jobs/nightly", []byte("0123456789abcdef"), int64(30e9), uint64(1))
	f.Add([]byte{0x0a, 0x01}, "\xff", []byte{1}, int64(-1), uint64(0))
	f.Add([]byte{}, "a\x00b", []byte{}, int64(1<<62), uint64(1<<63))
	once, _ := proto.Marshal(&api.AcquireRequest{RequestId: make([]byte, 16), LeaseSecret: []byte("0123456789abcdef"), Name: "jobs/nightly",
		OncePer: durationpb.New(24 * time.Hour)})
	f.Add(once, "jobs/nightly", []byte("0123456789abcdef"), int64(-1), uint64(1))
	ran, _ := proto.Marshal(&api.ReleaseRequest{RequestId: make([]byte, 16), LeaseSecret: []byte("0123456789abcdef"), Name: "jobs/nightly", RecordRun: true})
	f.Add(ran, "jobs/nightly", []byte("0123456789abcdef"), int64(0), uint64(3))
	f.Fuzz(func(t *testing.T, wire []byte, name string, lease []byte, nanos int64, token uint64) {
		check := func(what string, build func() (func() error, error)) {
			fsmErr, err := build()
			if err != nil {
				if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
					t.Fatalf("%s refused with %v, want InvalidArgument with a message", what, err)
				}
				return
			}
			if e := fsmErr(); e != nil {
				t.Fatalf("%s passed the API but the fsm refuses it: %v", what, e)
			}
		}
		var acq api.AcquireRequest
		if proto.Unmarshal(wire, &acq) == nil {
			check("wire acquire", func() (func() error, error) { c, err := l.acquire(&acq); return c.Validate, err })
		}
		var cl api.CreateLeaseRequest
		if proto.Unmarshal(wire, &cl) == nil {
			check("wire create-lease", func() (func() error, error) { c, err := l.createLease(&cl); c.Lease[0] = 1; return c.Validate, err })
		}
		var rel api.ReleaseRequest
		if proto.Unmarshal(wire, &rel) == nil {
			check("wire release", func() (func() error, error) { c, err := l.release(&rel, time.Unix(0, nanos)); return c.Validate, err })
		}
		var put api.PutRequest
		if proto.Unmarshal(wire, &put) == nil {
			check("wire put", func() (func() error, error) { c, err := l.put(&put); return c.Validate, err })
		}
		d := &durationpb.Duration{Seconds: nanos / 1e9, Nanos: int32(nanos % 1e9)}
		check("acquire", func() (func() error, error) {
			c, err := l.acquire(&api.AcquireRequest{LeaseSecret: lease, Name: name, LockDelay: d, OncePer: d})
			return c.Validate, err
		})
		check("create-lease", func() (func() error, error) {
			c, err := l.createLease(&api.CreateLeaseRequest{RequestId: lease, Ttl: d, Owner: name})
			c.Lease[0] = 1 // the server fills in a random id
			return c.Validate, err
		})
		check("put", func() (func() error, error) {
			c, err := l.put(&api.PutRequest{RequestId: lease, Key: name, Value: wire, Token: token})
			return c.Validate, err
		})
		check("release", func() (func() error, error) {
			c, err := l.release(&api.ReleaseRequest{LeaseSecret: lease, Name: name, RecordRun: token%2 == 1}, time.Unix(0, nanos))
			return c.Validate, err
		})
	})
}

// FuzzGateway posts arbitrary bodies to every call of the HTTP/JSON
// gateway of a running node: it must never panic, and must answer JSON —
// the call's answer with 200, or the error form with the HTTP status of
// its gRPC code.
func FuzzGateway(f *testing.F) {
	n := startNode(f, func(c *Config) { c.GatewayAddr = "127.0.0.1:0" })
	h := n.srv.gateway(&service{s: n.srv})
	calls := []string{"CreateLease", "KeepAlive", "Revoke", "Acquire", "Release", "GetLock", "ListLocks", "Put", "Get",
		"ForceRelease", "Members", "AddMember", "RemoveMember", "TransferLeader", "Backup", "", "../x"}
	f.Add(uint8(0), []byte(`{"request_id": "AAAAAAAAAAAAAAAAAAAAAQ==", "ttl": "30s"}`), "")
	f.Add(uint8(3), []byte(`{"request_id": "AAAAAAAAAAAAAAAAAAAAAg==", "lease_secret": "AAAAAAAAAAAAAAAAAAAAAw==", "name": "a", "seq": 1, "ack": 1}`), "10ms")
	f.Add(uint8(1), []byte(`{"lease_secret": "AQID", "seq": "18446744073709551615"}`), "")
	f.Add(uint8(9), []byte(`{"name": "\u0000", "token": -1}`), "-1s")
	f.Add(uint8(5), []byte("\xff{"), "1h1s")
	f.Add(uint8(16), []byte("0"), "") // /v1/../x: no redirect, a JSON refusal
	f.Fuzz(func(t *testing.T, call uint8, body []byte, timeout string) {
		url := "/v1/" + calls[int(call)%len(calls)]
		if timeout != "" {
			url += "?timeout=" + neturl.QueryEscape(timeout)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.RemoteAddr = "127.0.0.1:5555"
		h.ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("POST %s %q: %d, not JSON: %q", url, body, rec.Code, rec.Body.Bytes())
		}
		if rec.Code == http.StatusOK {
			return
		}
		e, _ := out["error"].(map[string]any)
		name, _ := e["status"].(string)
		n, ok := rpccode.Code_value[name]
		code := codes.Code(n)
		if !ok || e["message"] == "" || (httpStatus[code] != rec.Code && rec.Code != http.StatusMethodNotAllowed) {
			t.Fatalf("POST %s %q: HTTP %d with %v", url, body, rec.Code, out)
		}
	})
}
