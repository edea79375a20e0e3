package server

import (
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/fencehq/fence/internal/fsm"
)

// replica adapts fsm.State to raft.FSM. Raft calls Apply, Snapshot and
// Restore from one goroutine; readers take mu for reading.
type replica struct {
	mu    sync.RWMutex
	state *fsm.State // guarded by mu

	// applied is called with mu held for writing after each entry, with the
	// entry's index, commands and results, in log order. It must not block.
	applied func(index uint64, cmds []fsm.Command, results []fsm.Result)
	// restored is called with mu held for writing after a snapshot replaced the state.
	restored func()
	log      *slog.Logger
}

// Apply decodes a batch entry and applies each command. It returns the
// []fsm.Result in command order, or an error for an entry that does not
// decode (every replica skips it the same way).
func (r *replica) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	cmds, err := fsm.DecodeBatch(l.Data)
	if err != nil {
		r.log.Error("skipping undecodable log entry", "index", l.Index, "err", err)
		return fmt.Errorf("log entry %d: %w", l.Index, err)
	}
	results := make([]fsm.Result, len(cmds))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range cmds {
		results[i] = r.state.Apply(&cmds[i])
	}
	r.applied(l.Index, cmds, results)
	return results
}

// Snapshot encodes the state now; Persist writes it out later without
// holding the lock.
func (r *replica) Snapshot() (raft.FSMSnapshot, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return snapshot(r.state.Marshal(nil)), nil
}

// Restore replaces the state with a snapshot.
func (r *replica) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	s, err := fsm.Unmarshal(b)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = s
	r.restored()
	return nil
}

// read runs fn with the state locked for reading.
func (r *replica) read(fn func(s *fsm.State)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn(r.state)
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (snapshot) Release() {}
