package node

import (
	"bytes"
	"cmp"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/raftstore"
)

// Member is one node of the raft group as fence knows it: its name (the
// --node-id), the raft id derived from the name, and its raft address.
type Member struct {
	Name     string `json:"name"`
	RaftAddr string `json:"raft_addr"`
	// ID is the raft id, RaftID(Name); not written in conf change contexts.
	ID uint64 `json:"-"`
}

// RaftID is the raft id of the node named name: the FNV-1a hash of the
// name (never 0, raft's "none"). AddMember refuses a name whose id is taken.
func RaftID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// authorizePeer admits raft traffic over TLS only under the name its
// certificate names — a node certificate's common name is the member's
// name (--node-id), so one member's certificate cannot speak for another —
// never from a removed member, and otherwise only from a member, as this
// node knows the membership. The transport asks at every batch and at a
// snapshot's end, so a member's open stream ends with its removal. A node
// that is not in its own member list yet — a joiner that has not caught up
// to its own addition, which is when it learns the members — hears from
// any name not removed (the leader it must catch up from is one it does
// not know yet); but only once it has replayed its own log, since a
// restarted member's list lacks itself until then.
func (g *group) authorizePeer(from uint64, cert *x509.Certificate) error {
	name := cert.Subject.CommonName
	if id := RaftID(name); id != from {
		return fmt.Errorf("its certificate is member %q's (raft id %d), but it speaks as raft id %d: give each member a node certificate made for its own --node-id ('fence certs create-node ID')", name, id, from)
	}
	if g.isRemoved(from) {
		return fmt.Errorf("%q (raft id %d) was removed from this cluster: a removed member's certificate no longer talks raft, and a removed name never comes back (a replacement joins under another --node-id)", name, from)
	}
	if g.isMember(from) {
		return nil
	}
	if st := g.status.Load(); st.replayed && !g.isMember(g.c.cfg.id) {
		return nil // a joiner
	}
	return fmt.Errorf("%q (raft id %d) is not a member of this cluster as this node knows it ('fence members add' it first, then start it with --join)", name, from)
}

// memberContext is what a conf change entry carries in its context: the
// member (for adds) and the proposal that asked for it.
type memberContext struct {
	Member
	Proposal uint64 `json:"proposal,omitempty"`
}

func encodeContext(m Member, proposal uint64) []byte {
	b, _ := json.Marshal(memberContext{Member: m, Proposal: proposal}) // plain strings: cannot fail
	return b
}

func decodeContext(b []byte) (memberContext, error) {
	var c memberContext
	if len(b) == 0 {
		return c, nil
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("conf change context: %w", err)
	}
	c.ID = RaftID(c.Name)
	return c, nil
}

// members is the address book of the group, kept in log order by applying
// conf changes and carried in snapshots. Owned by the loop goroutine.
type members map[uint64]Member

func (ms members) sorted() []Member { return slices.SortedFunc(maps.Values(ms), byName) }

// apply changes the address book as the membership change v2 does; mc is
// its context as decodeContext returned it, with that call's error (an
// add without a readable member adds no address). A removed member's name
// goes into removed. An update (a lone member that moved: Node.moved)
// changes a member's address and nothing else.
func (ms members) apply(v2 *raftpb.ConfChangeV2, mc memberContext, ctxErr error, removed removedSet) {
	for _, ch := range v2.GetChanges() {
		switch ch.GetType() {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
			if ctxErr == nil && mc.ID == ch.GetNodeId() {
				ms[mc.ID] = mc.Member
				delete(removed, mc.ID) // AddMember refuses removed names; a log written before it may not
			}
		case raftpb.ConfChangeUpdateNode:
			if _, ok := ms[mc.ID]; ok && ctxErr == nil && mc.ID == ch.GetNodeId() {
				ms[mc.ID] = mc.Member
			}
		case raftpb.ConfChangeRemoveNode:
			if m, ok := ms[ch.GetNodeId()]; ok {
				removed[m.ID] = m.Name
			}
			delete(ms, ch.GetNodeId())
		}
	}
}

// confChangeOf decodes a membership change entry; ok is false for an entry
// of another type.
func confChangeOf(e *raftpb.Entry) (cc raftpb.ConfChangeI, ok bool, err error) {
	var m interface {
		proto.Message
		raftpb.ConfChangeI
	}
	switch e.GetType() {
	case raftpb.EntryConfChange:
		m = &raftpb.ConfChange{}
	case raftpb.EntryConfChangeV2:
		m = &raftpb.ConfChangeV2{}
	default:
		return nil, false, nil
	}
	return m, true, proto.Unmarshal(e.GetData(), m)
}

// recordedMembers is the address book as a log on disk has it: its
// snapshot's members, then every committed membership change after it (an
// uncommitted one may never take effect: a removal of the others not yet
// committed must not make a member look alone), before raft replays any
// of it.
func recordedMembers(s *raftstore.Store) (members, error) {
	ms := members{}
	hs, _, err := s.InitialState()
	if err != nil {
		return nil, err
	}
	snap, err := s.Snapshot()
	if err != nil {
		return nil, err
	}
	if len(snap.GetData()) > 0 {
		if ms, _, _, err = decodeSnapshot(snap.GetData()); err != nil {
			return nil, err
		}
	}
	first, err := s.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := s.LastIndex()
	if err != nil || last < first {
		return ms, err
	}
	ents, err := s.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if e.GetIndex() > hs.GetCommit() {
			break
		}
		if cc, ok, err := confChangeOf(e); ok && err == nil {
			v2 := cc.AsV2()
			mc, err := decodeContext(v2.GetContext())
			ms.apply(v2, mc, err, removedSet{})
		}
	}
	return ms, nil
}

// byName orders members by name.
func byName(a, b Member) int { return cmp.Compare(a.Name, b.Name) }

// A snapshot's data is the member list and the state machine's snapshot:
// snapshotMagic, a uvarint length and the members as JSON, then the state.
// snapshotMagicRemoved adds, after the members, a uvarint length and the
// names of the removed members as JSON (the raft port refuses them); it is
// written only when a member has been removed, so a cluster that never
// removed one writes what an older fence reads.
const (
	snapshotMagic        = "fence-snap-1\n"
	snapshotMagicRemoved = "fence-snap-2\n"
)

var errSnapshotFormat = errors.New("not a fence snapshot of this format")

// removedSet is the names of removed members, by raft id.
type removedSet map[uint64]string

// encodeSnapshot is a node snapshot of members ms, removed and an encoded
// state.
func encodeSnapshot(ms members, removed removedSet, state []byte) []byte {
	return append(snapshotHeader(ms, removed, len(state)), state...)
}

// snapshotData is a node snapshot of members ms, removed and the state of
// sm, which writes its encoding straight after the header into one
// buffer of about sizeHint bytes (the last snapshot's size and a
// margin): the state's encoding is never built apart and copied in.
func snapshotData(ms members, removed removedSet, sm stateMachine, sizeHint int) ([]byte, error) {
	b := bytes.NewBuffer(snapshotHeader(ms, removed, sizeHint))
	if err := sm.snapshot(b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// snapshotHeader returns the header of a node snapshot (magic, member list,
// removed members) in a buffer with room for more bytes after it.
func snapshotHeader(ms members, removed removedSet, more int) []byte {
	list, _ := json.Marshal(ms.sorted()) // plain strings: cannot fail
	magic := snapshotMagic
	var gone []byte
	if len(removed) > 0 {
		magic = snapshotMagicRemoved
		gone, _ = json.Marshal(slices.Sorted(maps.Values(removed)))
	}
	b := make([]byte, 0, len(magic)+2*binary.MaxVarintLen64+len(list)+len(gone)+more)
	b = append(b, magic...)
	b = binary.AppendUvarint(b, uint64(len(list)))
	b = append(b, list...)
	if gone != nil {
		b = binary.AppendUvarint(b, uint64(len(gone)))
		b = append(b, gone...)
	}
	return b
}

func decodeSnapshot(b []byte) (members, removedSet, []byte, error) {
	withRemoved := bytes.HasPrefix(b, []byte(snapshotMagicRemoved))
	if !withRemoved && !bytes.HasPrefix(b, []byte(snapshotMagic)) {
		return nil, nil, nil, errSnapshotFormat
	}
	b = b[len(snapshotMagic):] // both magics have one length
	field := func(what string, into any) error {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return fmt.Errorf("%w: bad %s length", errSnapshotFormat, what)
		}
		if err := json.Unmarshal(b[k:k+int(n)], into); err != nil {
			return fmt.Errorf("%w: %s: %v", errSnapshotFormat, what, err)
		}
		b = b[k+int(n):]
		return nil
	}
	var list []Member
	if err := field("member list", &list); err != nil {
		return nil, nil, nil, err
	}
	ms := members{}
	for _, m := range list {
		m.ID = RaftID(m.Name)
		ms[m.ID] = m
	}
	removed := removedSet{}
	if withRemoved {
		var names []string
		if err := field("removed members", &names); err != nil {
			return nil, nil, nil, err
		}
		if len(names) == 0 {
			return nil, nil, nil, fmt.Errorf("%w: a removed-members snapshot without removed members", errSnapshotFormat)
		}
		for _, name := range names {
			removed[RaftID(name)] = name
		}
	}
	return ms, removed, b, nil
}
