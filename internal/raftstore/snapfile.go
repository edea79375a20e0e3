package raftstore

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// castagnoli is the CRC table of etcd's snap files.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeSnap writes snapshot into dir as etcd's snap.Snapshotter.SaveSnap
// does — the same file name and, byte for byte, the same content, which
// the Snapshotter loads — and fsyncs it. SaveSnap marshals the snapshot
// into one []byte and then frames that in another, two copies of a
// snapshot as large as the state; this writes the frame, the data from
// the snapshot's own slice, and the metadata, each in place. The file is
// removed if it could not be written whole.
//
// The file is a snappb.Snapshot{crc: 1, data: 2} whose data is the
// marshaled raftpb.Snapshot{data: 1, metadata: 2} (fields in number
// order, as proto.Marshal writes them) and whose crc is the Castagnoli
// CRC-32 of that.
func writeSnap(dir string, snapshot *raftpb.Snapshot) (err error) {
	if raft.IsEmptySnap(snapshot) {
		return nil
	}
	md := snapshot.GetMetadata()
	tail, err := proto.Marshal(&raftpb.Snapshot{Metadata: md})
	if err != nil {
		return fmt.Errorf("snapshot metadata: %w", err)
	}
	data := snapshot.GetData()
	var head []byte
	if snapshot.Data != nil { // proto2: a nil data field is absent, an empty one present
		head = protowire.AppendTag(head, 1, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(data)))
	}
	crc := crc32.Update(0, castagnoli, head)
	crc = crc32.Update(crc, castagnoli, data)
	crc = crc32.Update(crc, castagnoli, tail)
	frame := protowire.AppendTag(nil, 1, protowire.VarintType)
	frame = protowire.AppendVarint(frame, uint64(crc))
	frame = protowire.AppendTag(frame, 2, protowire.BytesType)
	frame = protowire.AppendVarint(frame, uint64(len(head)+len(data)+len(tail)))

	path := filepath.Join(dir, fmt.Sprintf("%016x-%016x.snap", md.GetTerm(), md.GetIndex()))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			err = errors.Join(err, os.Remove(path))
		}
	}()
	for _, b := range [][]byte{frame, head, data, tail} {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return fileutil.Fsync(f)
}

// readSnap reads the snapshot file dir/<term>-<index>.snap of md (as
// writeSnap and etcd's Snapshotter write it), checks its CRC and returns
// it. Unlike etcd's snap.Read, which unmarshals the frame and then the
// snapshot (each a copy of the data), the returned Data is a slice of the
// one buffer the file was read into. The file must name md's index and
// term in its metadata too.
func readSnap(dir string, md *raftpb.SnapshotMetadata) (*raftpb.Snapshot, error) {
	path := filepath.Join(dir, fmt.Sprintf("%016x-%016x.snap", md.GetTerm(), md.GetIndex()))
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crc uint64
	var body []byte
	haveCRC, haveBody := false, false
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			crc, haveCRC = x, true
		case num == 2 && typ == protowire.BytesType:
			body, haveBody = v, true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: frame: %w", path, err)
	}
	if !haveCRC || !haveBody || crc == 0 || len(body) == 0 {
		return nil, fmt.Errorf("%s: no CRC or no snapshot in the frame", path)
	}
	if got := crc32.Checksum(body, castagnoli); uint64(got) != crc {
		return nil, fmt.Errorf("%s: CRC mismatch (the file says %#x, its bytes give %#x)", path, crc, got)
	}
	snapshot := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{}}
	err = eachField(body, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			snapshot.Data = v[:len(v):len(v)]
		case num == 2 && typ == protowire.BytesType:
			return proto.UnmarshalOptions{Merge: true}.Unmarshal(v, snapshot.Metadata)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: snapshot: %w", path, err)
	}
	if got := snapshot.GetMetadata(); got.GetIndex() != md.GetIndex() || got.GetTerm() != md.GetTerm() {
		return nil, fmt.Errorf("%s: holds the snapshot at index %d term %d", path, got.GetIndex(), got.GetTerm())
	}
	return snapshot, nil
}

// eachField calls f with each field of the protobuf message b: its number,
// wire type, and its bytes (length-delimited) or value (varint); other
// wire types are skipped.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
