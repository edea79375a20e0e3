package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/transport/transportpb"
)

func fuzzReceiver() *receiver {
	return &receiver{clusterID: 7, localID: 2, deliver: func(*raftpb.Message) {}, log: slog.New(slog.DiscardHandler)}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkRefusal fails unless err is one of the statuses the receiver refuses
// with.
func checkRefusal(t *testing.T, err error) {
	if c := status.Code(err); c != codes.InvalidArgument && c != codes.FailedPrecondition {
		t.Fatalf("refused with %v, want InvalidArgument or FailedPrecondition", err)
	}
}

// FuzzDecodeBatch feeds arbitrary bytes through the receiving decode path:
// the Batch as gRPC's codec would decode it, then decodeBatch. It must
// never panic; what it accepts must be addressed from the batch's sender to
// this node, and what it refuses must be refused with a proper status.
func FuzzDecodeBatch(f *testing.F) {
	good := mustMarshal(f, appMsg(1, 2, 5, 20))
	hb := mustMarshal(f, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Commit: new(uint64(9))})
	snap := mustMarshal(f, snapMsg(1, 2, 64))
	for _, b := range []*transportpb.Batch{
		{ClusterId: 7, From: 1, To: 2},
		{ClusterId: 7, From: 1, To: 2, Messages: [][]byte{good, hb, snap}},
		{ClusterId: 8, From: 1, To: 2, Messages: [][]byte{good}},
		{ClusterId: 7, From: 1, To: 3, Messages: [][]byte{good}},
		{ClusterId: 7, From: 3, To: 2, Messages: [][]byte{good}},
		{ClusterId: 7, From: 1, To: 2, Messages: [][]byte{good[:len(good)/2]}},
		{ClusterId: 7, From: 1, To: 2, Messages: [][]byte{{0x08, 0x80}}},
	} {
		f.Add(mustMarshal(f, b))
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	r := fuzzReceiver()
	f.Fuzz(func(t *testing.T, data []byte) {
		var b transportpb.Batch
		if proto.Unmarshal(data, &b) != nil {
			return // gRPC's codec refuses it before the handler sees it
		}
		msgs, err := r.decodeBatch(&b)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if b.GetClusterId() != 7 || b.GetTo() != 2 || len(msgs) != len(b.GetMessages()) {
			t.Fatalf("accepted batch %v as %d messages", &b, len(msgs))
		}
		for _, m := range msgs {
			if m.GetFrom() != b.GetFrom() || m.GetTo() != 2 {
				t.Fatalf("accepted message %v in a batch from %d", m, b.GetFrom())
			}
		}
	})
}

// FuzzReceiveSnapshot feeds arbitrary chunk sequences to the snapshot
// reassembly. The input is a list of chunks, each a 2-byte big-endian length
// and that many bytes of marshaled SnapshotChunk. It must never panic, and a
// snapshot it accepts must hold exactly the data announced.
func FuzzReceiveSnapshot(f *testing.F) {
	frame := func(chunks ...*transportpb.SnapshotChunk) []byte {
		var out []byte
		for _, c := range chunks {
			b := mustMarshal(f, c)
			out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
			out = append(out, b...)
		}
		return out
	}
	s := snapMsg(1, 2, 0)
	s.Snapshot.Data = nil
	hdr := mustMarshal(f, s)
	f.Add(frame(&transportpb.SnapshotChunk{ClusterId: 7, From: 1, To: 2, Message: hdr, DataSize: 6},
		&transportpb.SnapshotChunk{Data: []byte("abc")}, &transportpb.SnapshotChunk{Data: []byte("def")}))
	f.Add(frame(&transportpb.SnapshotChunk{ClusterId: 7, From: 1, To: 2, Message: hdr}))
	f.Add(frame(&transportpb.SnapshotChunk{ClusterId: 7, From: 1, To: 2, Message: hdr, DataSize: 1 << 40},
		&transportpb.SnapshotChunk{Data: []byte("abc")}))
	f.Add(frame(&transportpb.SnapshotChunk{ClusterId: 7, From: 1, To: 2, Message: []byte{1, 2, 3}}))
	f.Add([]byte{0, 3, 0xff, 0xff, 0xff})
	r := fuzzReceiver()
	f.Fuzz(func(t *testing.T, data []byte) {
		var announced uint64
		first := true
		recv := func() (*transportpb.SnapshotChunk, error) {
			if len(data) < 2 {
				return nil, io.EOF
			}
			n := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			if n > len(data) {
				return nil, errors.New("truncated")
			}
			c := new(transportpb.SnapshotChunk)
			if err := proto.Unmarshal(data[:n], c); err != nil {
				return nil, err
			}
			data = data[n:]
			if first {
				announced, first = c.GetDataSize(), false
			}
			return c, nil
		}
		m, err := r.receiveSnapshot(recv, func(uint64) error { return nil })
		if err != nil {
			return
		}
		if m.GetType() != raftpb.MsgSnap || m.GetFrom() == 0 || m.GetTo() != 2 ||
			uint64(len(m.GetSnapshot().GetData())) != announced {
			t.Fatalf("accepted %v with %d of %d bytes", m.GetType(), len(m.GetSnapshot().GetData()), announced)
		}
	})
}

// FuzzServe feeds arbitrary bytes to the receiver as one whole connection
// (preface, kind, frames): it must never panic, never hang, deliver only
// checked peer messages, and answer anything it refuses with a refusal
// status.
func FuzzServe(f *testing.F) {
	batch := func(b *transportpb.Batch) []byte {
		raw := mustMarshal(f, b)
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(raw))), raw...)
	}
	good := mustMarshal(f, appMsg(1, 2, 1, 8))
	hello := batch(&transportpb.Batch{ClusterId: 7, From: 1, To: 2})
	f.Add(append([]byte(preface+"M"), append(hello, batch(&transportpb.Batch{ClusterId: 7, From: 1, To: 2, Messages: [][]byte{good}})...)...))
	f.Add(append([]byte(preface+"M"), batch(&transportpb.Batch{ClusterId: 9, From: 1, To: 2})...))
	f.Add(append([]byte(preface+"S"), 0, 0, 0, 0))
	f.Add([]byte(preface + "M\xff\xff\xff\xff"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var delivered []*raftpb.Message
		r := fuzzReceiver()
		r.deliver = func(m *raftpb.Message) { delivered = append(delivered, m) }
		server, client := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); r.serve(server) }()
		answers := make(chan []error, 1)
		go func() {
			var errs []error
			br := bufio.NewReader(client)
			for {
				err := readAnswer(br)
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, io.ErrUnexpectedEOF) {
					break
				}
				errs = append(errs, err)
				if err != nil && status.Code(err) == codes.Unknown {
					break
				}
			}
			answers <- errs
		}()
		_, _ = client.Write(data)
		client.Close()
		<-done
		for _, err := range <-answers {
			if err != nil {
				checkRefusal(t, err)
			}
		}
		for _, m := range delivered {
			if !PeerMessage(m.GetType()) || m.GetTo() != 2 || m.GetFrom() == 0 || m.GetFrom() == 2 {
				t.Fatalf("delivered %v from %d to %d", m.GetType(), m.GetFrom(), m.GetTo())
			}
		}
	})
}
