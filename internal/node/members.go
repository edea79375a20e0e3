package node

import (
	"cmp"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
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

// authorizePeer admits raft traffic over TLS only from a member, as this
// node knows the membership, and only under the name its certificate
// names: a node certificate's common name is the member's name
// (--node-id), so one member's certificate cannot speak for another, and
// a removed member's cannot speak at all. The transport asks at every
// batch, so a member's open stream ends with its removal.
func (g *group) authorizePeer(from uint64, cert *x509.Certificate) error {
	name := cert.Subject.CommonName
	if id := RaftID(name); id != from {
		return fmt.Errorf("its certificate is member %q's (raft id %d), but it speaks as raft id %d: give each member a node certificate made for its own --node-id ('fence certs create-node ID')", name, id, from)
	}
	if !g.isMember(from) {
		return fmt.Errorf("%q (raft id %d) is not a member of this cluster as this node knows it: a removed member, or one being added that this node has not applied yet ('fence members add' first)", name, from)
	}
	return nil
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

// byName orders members by name.
func byName(a, b Member) int { return cmp.Compare(a.Name, b.Name) }

// A snapshot's data is the member list and the state machine's snapshot:
// snapshotMagic, a uvarint length and the members as JSON, then the state.
const snapshotMagic = "fence-snap-1\n"

var errSnapshotFormat = errors.New("not a fence snapshot of this format")

func encodeSnapshot(ms members, state []byte) []byte {
	list, _ := json.Marshal(ms.sorted()) // plain strings: cannot fail
	b := make([]byte, 0, len(snapshotMagic)+binary.MaxVarintLen64+len(list)+len(state))
	b = append(b, snapshotMagic...)
	b = binary.AppendUvarint(b, uint64(len(list)))
	b = append(b, list...)
	return append(b, state...)
}

func decodeSnapshot(b []byte) (members, []byte, error) {
	if len(b) < len(snapshotMagic) || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, nil, errSnapshotFormat
	}
	b = b[len(snapshotMagic):]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, fmt.Errorf("%w: bad member list length", errSnapshotFormat)
	}
	var list []Member
	if err := json.Unmarshal(b[k:k+int(n)], &list); err != nil {
		return nil, nil, fmt.Errorf("%w: member list: %v", errSnapshotFormat, err)
	}
	ms := members{}
	for _, m := range list {
		m.ID = RaftID(m.Name)
		ms[m.ID] = m
	}
	return ms, b[k+int(n):], nil
}
