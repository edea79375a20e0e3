package server_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/audit"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

// TestAuditFile checks that the audit file holds each grant and release with
// the lease's public number and the token, in index order.
func TestAuditFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	srv := locktest.Start(t, func(c *server.Config) { c.AuditFile = path })
	l := locktest.LockOnce(t.Context(), t, srv, "audited", client.WithTTL(5*time.Second))

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kinds []string
	var last uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec audit.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		if rec.Index <= last {
			t.Fatalf("index %d after %d", rec.Index, last)
		}
		last = rec.Index
		for _, e := range rec.Events {
			kinds = append(kinds, e.Kind+"/"+e.Cmd)
			if e.Lease == 0 {
				t.Errorf("event without a lease number: %+v", e)
			}
			if (e.Kind == "granted" || e.Kind == "released") && (e.Lock != "audited" || e.Token != l.Token()) {
				t.Errorf("event %+v, want lock audited token %d", e, l.Token())
			}
		}
	}
	want := []string{"lease-started/create-lease", "granted/acquire", "released/release"}
	if len(kinds) < 3 || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Fatalf("audit events %v, want %v first", kinds, want)
	}
}
