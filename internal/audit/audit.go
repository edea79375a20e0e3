// Package audit writes and defines the audit file: one JSON line per applied
// raft entry that started or ended a lease or granted or released a lock,
// and one per call the policy refused on this node.
// It is a leaf package, so tools that read audit files (internal/chaos) need
// not import the server.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencehq/fence/internal/fsm"
)

// Record is one line of the audit file: the lease and lock changes of
// one applied raft entry, or a snapshot restore. Every node writes the same
// records for the same index; a node that restarts re-applies the entries
// after its last snapshot and writes them again.
type Record struct {
	// Index is the raft index of the entry (0 on a Restored record).
	Index uint64 `json:"index,omitempty"`
	// Restored marks a snapshot replacing the state: records before it are
	// not replayed on this node.
	Restored bool `json:"restored,omitempty"`
	// Events are the entry's changes, in the order they happened.
	Events []Event `json:"events,omitempty"`
	// Denied, on a record of its own (no Index), is a call this node's
	// policy refused; only the node that received it writes it.
	Denied *Denial `json:"denied,omitempty"`
}

// Denial is a refused call and who made it.
type Denial struct {
	At       time.Time `json:"at"`
	Method   string    `json:"method"`
	Identity string    `json:"identity,omitempty"` // "" when the caller had none
	Caller   string    `json:"caller"`             // its network address
	Code     string    `json:"code"`               // Unauthenticated or PermissionDenied
	Reason   string    `json:"reason"`
}

// Event is one change. Leases appear by their public number, never by
// their secret id.
type Event struct {
	// Kind is "lease-started", "lease-ended", "granted" or "released".
	Kind string `json:"kind"`
	// Cmd is the command that caused it: "create-lease", "acquire", "expire", …
	Cmd string `json:"cmd"`
	// Lease is the public number of the lease concerned (0: not a live lease).
	Lease uint64 `json:"lease"`
	// Lock is the lock's name (granted, released).
	Lock string `json:"lock,omitempty"`
	// Token is the grant's token (granted, released).
	Token uint64 `json:"token,omitempty"`
	// Slot is a semaphore permit's slot, Shared a read-write lock reader's
	// grant (granted, released).
	Slot   uint32 `json:"slot,omitempty"`
	Shared bool   `json:"shared,omitempty"`
	// TraceID is the W3C trace id (32 hex digits) of the traced call whose
	// command caused the change, on the line of the member that proposed
	// it (the leader that took the call) only: the raft log does not carry
	// it, so the other members, and this one replaying its log, leave it
	// out. A grant handed on to a waiter carries the trace of the release
	// (or expiry) that freed the lock, which caused it.
	TraceID string `json:"trace_id,omitempty"`
}

// SameChange reports whether e and o record the same change: they agree
// on everything but TraceID, which only the member that proposed the
// change writes.
func (e Event) SameChange(o Event) bool {
	e.TraceID, o.TraceID = "", ""
	return e == o
}

// Log appends Records as JSON lines, one write per entry, so a
// killed node loses nothing it applied.
type Log struct {
	mu sync.Mutex // Denied is called from the handlers, Entry from the apply loop
	f  *os.File
}

// Check reports, without creating anything, whether Open(path) would
// fail: an existing file must open for appending, a new one needs a
// directory this process may write in.
func Check(path string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("audit file: %w", err)
	}
	dir := filepath.Dir(path)
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("audit file %s: its directory %s: %w", path, dir, err)
	}
	return nil
}

// Open opens (or creates) the audit file at path for appending.
func Open(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	return &Log{f: f}, nil
}

// audited are the events an audit record keeps (named by EventKind.String).
var audited = map[fsm.EventKind]bool{fsm.LeaseStarted: true, fsm.LeaseEnded: true, fsm.Granted: true, fsm.Released: true}

// Entry records the audited events of one applied entry, if it has any.
// traces, if not nil, holds the trace id of each command (zero: none).
func (a *Log) Entry(index uint64, cmds []fsm.Command, results []fsm.Result, traces []trace.TraceID) error {
	rec := Record{Index: index}
	for i := range results {
		var traceID string
		if i < len(traces) && traces[i].IsValid() {
			traceID = traces[i].String()
		}
		for _, e := range results[i].Events {
			if audited[e.Kind] {
				rec.Events = append(rec.Events, Event{Kind: e.Kind.String(), Cmd: cmds[i].Kind.String(), Lease: e.Number, Lock: e.Name, Token: e.Token,
					Slot: e.Slot, Shared: e.Shared, TraceID: traceID})
			}
		}
	}
	if len(rec.Events) == 0 {
		return nil
	}
	return a.write(rec)
}

// Denied records a refused call.
func (a *Log) Denied(d Denial) error { return a.write(Record{Denied: &d}) }

// Restored records that a snapshot replaced the state.
func (a *Log) Restored() error { return a.write(Record{Restored: true}) }

func (a *Log) write(rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err = a.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (a *Log) Close() error { return a.f.Close() }
