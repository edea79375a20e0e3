package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/raftstore"
)

// Backup is a consistent copy of the replicated state: the state after
// applying entry Index, in the fsm's snapshot encoding.
type Backup struct {
	ClusterID uint64
	// Index is the last entry applied to State; Term the raft term this
	// node was in when it copied it.
	Index, Term uint64
	State       []byte
	// Token is the last fencing token granted in State; Leases and Locks
	// are State's sizes.
	Token         uint64
	Leases, Locks int
	// TakenAt is this node's wall clock when it copied State (for people:
	// nothing is timed by it).
	TakenAt time.Time
}

// Backup copies the state after a linearizable read (Read): it holds every
// write acknowledged before the call. Leader only, like Read.
func (n *Node) Backup(ctx context.Context) (Backup, error) {
	b := Backup{ClusterID: n.clusterID}
	err := n.Read(ctx, func(s *fsm.State) {
		b.State, b.Index = s.Marshal(nil), n.replica.index // Read holds the replica's lock: index is State's
		b.Token, b.Leases, b.Locks = s.Token(), s.NumLeases(), s.NumLocks()
	})
	b.Term, b.TakenAt = n.RaftStatus().Term, time.Now()
	return b, err
}

// Seed makes dataDir the data dir of a new cluster of one member, named
// name and dialed at raftAddr, whose state is state (the fsm's snapshot
// encoding, as in a Backup): FORMAT, and a raft log that holds only a
// snapshot of state at index 1 with this node as the only voter, under a
// new cluster id, which it returns. A node started on it leads at once,
// and others join it. dataDir must be missing or empty; a Seed that fails
// removes what it wrote.
func Seed(dataDir, name, raftAddr string, state []byte, log *slog.Logger) (clusterID uint64, err error) {
	if _, err := fsm.Unmarshal(state); err != nil {
		return 0, fmt.Errorf("the state to seed %s with: %w", dataDir, err)
	}
	// onlyHolds refuses a dataDir with more than want entries.
	notEmpty := fmt.Errorf("data dir %s is not empty: a restore seeds a new data dir (give a missing or empty --data-dir)", dataDir)
	onlyHolds := func(want int) error {
		entries, err := os.ReadDir(dataDir)
		if err == nil && len(entries) > want {
			return notEmpty
		}
		return err
	}
	_, statErr := os.Stat(dataDir)
	if err := onlyHolds(0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return 0, fmt.Errorf("data dir: %w", err)
	}
	dirLock, err := lockDataDir(dataDir)
	if err != nil {
		return 0, err // another process holds it: nothing of its is touched
	}
	defer dirLock.Close()
	// Held now, and still nothing but the lock in it? (Another start may
	// have slipped in before the lock.) Only then is what fails undone.
	if err := onlyHolds(1); err != nil {
		return 0, err
	}
	defer func() {
		if err == nil {
			return
		}
		for _, name := range []string{formatFile, raftDir, lockFile} {
			os.RemoveAll(filepath.Join(dataDir, name)) // what this seed wrote
		}
		if errors.Is(statErr, fs.ErrNotExist) {
			os.Remove(dataDir) // and the dir, if it made it
		}
	}()
	if _, err := checkFormat(dataDir); err != nil {
		return 0, err
	}
	clusterID = randomUint64() | 1
	md, _ := json.Marshal(metadata{ClusterID: clusterID, Name: name})
	store, err := raftstore.Create(filepath.Join(dataDir, raftDir), md, log)
	if err != nil {
		return 0, err
	}
	id := RaftID(name)
	self := members{id: {Name: name, RaftAddr: raftAddr, ID: id}}
	snap := &raftpb.Snapshot{Data: encodeSnapshot(self, removedSet{}, state), Metadata: &raftpb.SnapshotMetadata{
		Index: new(uint64(1)), Term: new(uint64(1)), ConfState: &raftpb.ConfState{Voters: []uint64{id}}}}
	err = store.Append(&raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}, nil, snap)
	return clusterID, errors.Join(err, store.Close())
}
