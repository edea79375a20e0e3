package server_test

import (
	"net/http"
	"strconv"
	"testing"
)

// TestGatewayRelockBadInput: a release_token the JSON mapping cannot read
// (negative, above 2^64−1, not a number, a fraction), or a relock without
// wait, is refused with HTTP 400 and changes nothing: the lease still holds
// its grant, and a relock with the right token then works.
func TestGatewayRelockBadInput(t *testing.T) {
	g, certs := startGateway(t)
	alice := g.as(certs, "alice")
	_, lease := alice.post("/v1/CreateLease", `{"request_id": "`+jsonID()+`", "ttl": "30s", "owner": "curl"}`)
	secret, _ := lease["lease_secret"].(string)
	acquire := func(seq, extra string) (int, map[string]any) {
		return alice.post("/v1/Acquire", `{"request_id": "`+jsonID()+`", "lease_secret": "`+secret+`", "name": "a/loop", "seq": `+seq+`, "ack": 1`+extra+`}`)
	}
	if code, grant := acquire("1", `, "wait": true`); code != http.StatusOK || grant["token"] != "1" {
		t.Fatalf("Acquire: %d %v", code, grant)
	}
	for i, extra := range []string{
		`, "wait": true, "release_token": -1`,
		`, "wait": true, "release_token": "18446744073709551616"`,
		`, "wait": true, "release_token": "one"`,
		`, "wait": true, "release_token": 1.5`,
		`, "wait": true, "release_token": true`,
		`, "release_token": 1`,
		`, "wait": false, "release_token": "1"`,
		`, "wait": true, "once_per": "1h", "release_token": "1"`,
	} {
		code, out := acquire(strconv.Itoa(i+2), extra)
		if code != http.StatusBadRequest {
			t.Fatalf("%s: HTTP %d %v, want 400", extra, code, out)
		}
	}
	if code, grant := acquire("20", `, "wait": true, "release_token": "1"`); code != http.StatusOK || grant["token"] != "2" {
		t.Fatalf("relock after the refusals: %d %v, want token 2 (nothing changed)", code, grant)
	}
}
