package node

import (
	"fmt"
	"io"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencehq/fence/internal/fsm"
)

// replica is the fsm.State this node applies committed entries to. The loop
// goroutine applies, snapshots and restores; readers take mu for reading.
type replica struct {
	mu    sync.RWMutex
	state *fsm.State // guarded by mu
	index uint64     // guarded by mu: the last entry applied to state (or the snapshot's)

	// applied is called with mu held for writing after each entry, with the
	// entry's index, commands and results, in log order. It must not block.
	// traces are the commands' trace ids when this node proposed the entry
	// (see stateMachine.apply), else nil.
	applied func(index uint64, cmds []fsm.Command, results []fsm.Result, traces []trace.TraceID)
	// restored is called with mu held for writing after a snapshot taken at
	// index replaced the state.
	restored func(index uint64)
	log      *slog.Logger
}

// apply decodes a batch entry and applies each command. It returns the
// []fsm.Result in command order, or an error for an entry that does not
// decode (every replica skips it the same way).
func (r *replica) apply(index uint64, data []byte, traces []trace.TraceID) any {
	cmds, err := fsm.DecodeBatch(data)
	if err != nil {
		r.log.Error("skipping undecodable log entry", "index", index, "err", err)
		return fmt.Errorf("log entry %d: %w", index, err)
	}
	results := make([]fsm.Result, len(cmds))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.index = index
	for i := range cmds {
		results[i] = r.state.Apply(&cmds[i])
	}
	r.applied(index, cmds, results, traces)
	return results
}

// snapshot writes the encoding of the state as applied so far to w, a
// chunk at a time (fsm.State.Encode).
func (r *replica) snapshot(w io.Writer) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.Encode(func(chunk []byte) error {
		_, err := w.Write(chunk)
		return err
	})
}

// restore replaces the state with a snapshot's, taken at index.
func (r *replica) restore(index uint64, b []byte) error {
	s, err := fsm.Unmarshal(b)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state, r.index = s, index
	r.restored(index)
	return nil
}

// read runs fn with the state locked for reading.
func (r *replica) read(fn func(s *fsm.State)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn(r.state)
}

// readAt is read that also passes the index of the last entry applied.
func (r *replica) readAt(fn func(s *fsm.State, index uint64)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn(r.state, r.index)
}
