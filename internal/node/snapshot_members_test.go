package node

import (
	"bytes"
	"errors"
	"maps"
	"testing"
)

// A snapshot keeps the removed members (the raft port refuses them after a
// restart too), and one of a group that never removed a member is written
// in the format an older fence reads.
func TestSnapshotKeepsRemovedMembers(t *testing.T) {
	ms := members{}
	for _, name := range []string{"n1", "n2"} {
		ms[RaftID(name)] = Member{ID: RaftID(name), Name: name, RaftAddr: name + ":7302"}
	}
	state := []byte("state bytes")
	for _, removed := range []removedSet{{}, {RaftID("n3"): "n3", RaftID("n4"): "n4"}} {
		b := encodeSnapshot(ms, removed, state)
		if want := map[bool]string{true: snapshotMagic, false: snapshotMagicRemoved}[len(removed) == 0]; !bytes.HasPrefix(b, []byte(want)) {
			t.Fatalf("%d removed: written as %q, want %q", len(removed), b[:len(want)], want)
		}
		gotMs, gotRemoved, gotState, err := decodeSnapshot(b)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(gotMs, ms) || !maps.Equal(gotRemoved, removed) || !bytes.Equal(gotState, state) {
			t.Fatalf("round trip: %v %v %q, want %v %v %q", gotMs, gotRemoved, gotState, ms, removed, state)
		}
	}
	for name, b := range map[string][]byte{
		"no removed in a removed-members snapshot": append([]byte(snapshotMagicRemoved), 2, '[', ']', 2, '[', ']'),
		"truncated removed list":                   append([]byte(snapshotMagicRemoved), 2, '[', ']', 9, '['),
		"unknown magic":                            []byte("fence-snap-3\n"),
	} {
		if _, _, _, err := decodeSnapshot(b); !errors.Is(err, errSnapshotFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
