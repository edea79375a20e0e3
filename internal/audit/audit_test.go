package audit_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencehq/fence/internal/audit"
	"github.com/fencehq/fence/internal/fsm"
)

// TestEntryTraceIDs: an entry's events carry the trace id of the command
// that caused them, when given; none for an untraced command, and none
// when no trace ids are given (another member's apply, a replay). Events
// that differ only in their trace id are the same change.
func TestEntryTraceIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	cmds := []fsm.Command{{Kind: fsm.KindAcquire}, {Kind: fsm.KindRelease}}
	results := []fsm.Result{
		{Events: []fsm.Event{{Kind: fsm.Granted, Name: "a", Token: 7, Number: 1}}},
		{Events: []fsm.Event{{Kind: fsm.Released, Name: "b", Token: 5, Number: 2}, {Kind: fsm.Granted, Name: "b", Token: 8, Number: 3}}},
	}
	traced := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	if err := a.Entry(10, cmds, results, []trace.TraceID{traced, {}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Entry(11, cmds, results, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []audit.Record
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var rec audit.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if len(recs) != 2 || len(recs[0].Events) != 3 || len(recs[1].Events) != 3 {
		t.Fatalf("records %+v, want two of three events", recs)
	}
	want := []string{"4bf92f3577b34da6a3ce929d0e0e4736", "", ""}
	for i, e := range recs[0].Events {
		if e.TraceID != want[i] {
			t.Errorf("traced entry, event %d (%s): trace id %q, want %q", i, e.Kind, e.TraceID, want[i])
		}
		if o := recs[1].Events[i]; o.TraceID != "" || !e.SameChange(o) {
			t.Errorf("untraced entry, event %d: %+v; want %+v without a trace id", i, o, e)
		}
	}
	if recs[0].Events[0].SameChange(recs[0].Events[2]) {
		t.Error("two different grants are the same change")
	}
}
