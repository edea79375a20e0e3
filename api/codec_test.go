package api_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // the default codec, to compare with
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// TestCodecIsProto: for every message of fence's API, filled in
// every field, api.Codec writes what proto reads back equal, and reads what
// proto writes equal: the generated code and protobuf agree on the wire.
func TestCodecIsProto(t *testing.T) {
	msgs := api.File_fence_v1_fence_proto.Messages()
	n := 0
	for i := 0; i < msgs.Len(); i++ {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(msgs.Get(i).FullName())
		if err != nil {
			t.Fatal(err)
		}
		for variant := 0; variant < 3; variant++ {
			m := mt.New()
			fill(m, variant, 0)
			t.Run(fmt.Sprintf("%s/%d", mt.Descriptor().Name(), variant), func(t *testing.T) { roundTrip(t, m.Interface()) })
			n++
		}
	}
	if n < 60 {
		t.Fatalf("only %d messages checked: the descriptors are not what this test expects", n)
	}
}

// TestCodecFallsBack: a message without generated code (gRPC's health
// check, served on the same server) goes through proto.
func TestCodecFallsBack(t *testing.T) {
	roundTrip(t, &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING})
	if _, err := api.Codec.Marshal(42); err == nil {
		t.Fatal("Marshal(42): no error")
	}
	if err := api.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{8, 1})}, new(int)); err == nil {
		t.Fatal("Unmarshal into *int: no error")
	}
}

// TestCodecRefusesGarbage: bytes that are no message are an error, as with
// proto, not a partly filled message taken for a request.
func TestCodecRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{{0x0a, 0x05, 1}, {0xff}, {0x08}, {0x12, 0x80}} {
		perr := proto.Unmarshal(b, &api.KeepAliveRequest{})
		cerr := api.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &api.KeepAliveRequest{})
		if perr == nil || cerr == nil {
			t.Errorf("%x: proto says %v, the codec says %v: both should refuse", b, perr, cerr)
		}
	}
}

func roundTrip(t *testing.T, m proto.Message) {
	t.Helper()
	data, err := api.Codec.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(data.Materialize(), got); err != nil {
		t.Fatalf("proto cannot read what the codec wrote: %v", err)
	}
	if !proto.Equal(m, got) {
		t.Fatalf("codec → proto: sent\n%v\nread\n%v", prototext.Format(m), prototext.Format(got))
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got = m.ProtoReflect().New().Interface()
	if err := api.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
		t.Fatalf("the codec cannot read what proto wrote: %v", err)
	}
	if !proto.Equal(m, got) {
		t.Fatalf("proto → codec: sent\n%v\nread\n%v", prototext.Format(m), prototext.Format(got))
	}
}

// fill sets every field of m (variant 0: small values, 1: large ones, 2:
// every other field left empty), lists with two elements, nested messages
// to depth 3.
func fill(m protoreflect.Message, variant, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if variant == 2 && i%2 == 1 {
			continue
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.WhichOneof(od) != nil {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(scalar(fd.MapKey(), variant, 0).MapKey(), mapValue(mp, fd.MapValue(), variant, depth))
		case fd.IsList():
			l := m.Mutable(fd).List()
			for k := 0; k < 2; k++ {
				if fd.Message() != nil {
					if depth >= 3 {
						break
					}
					e := l.NewElement()
					fill(e.Message(), variant, depth+1)
					l.Append(e)
				} else {
					l.Append(scalar(fd, variant, k))
				}
			}
		case fd.Message() != nil:
			if depth < 3 {
				fill(m.Mutable(fd).Message(), variant, depth+1)
			}
		default:
			m.Set(fd, scalar(fd, variant, 0))
		}
	}
}

func mapValue(mp protoreflect.Map, fd protoreflect.FieldDescriptor, variant, depth int) protoreflect.Value {
	if fd.Message() != nil {
		v := mp.NewValue()
		if depth < 3 {
			fill(v.Message(), variant, depth+1)
		}
		return v
	}
	return scalar(fd, variant, 1)
}

func scalar(fd protoreflect.FieldDescriptor, variant, k int) protoreflect.Value {
	big := variant == 1
	n := int64(7 + k)
	if big {
		n = 1<<62 + int64(k)
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if big {
			return protoreflect.ValueOfInt32(-1 << 30)
		}
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if big {
			return protoreflect.ValueOfUint32(1 << 31)
		}
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if big {
			return protoreflect.ValueOfInt64(-n)
		}
		return protoreflect.ValueOfInt64(n)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n) << 1)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(2.5)
	case protoreflect.StringKind:
		if big {
			return protoreflect.ValueOfString(fmt.Sprintf("%0300d", k))
		}
		return protoreflect.ValueOfString(fmt.Sprintf("s%d", k))
	case protoreflect.BytesKind:
		if big {
			return protoreflect.ValueOfBytes(make([]byte, 70<<10)) // above gRPC's buffer pooling threshold
		}
		return protoreflect.ValueOfBytes([]byte{byte(k), 0xff})
	}
	panic(fmt.Sprintf("no value for %v", fd.Kind()))
}

// BenchmarkCodec: one renewal's server side (a request read, an answer
// written) with api.Codec and with gRPC's default proto codec.
func BenchmarkCodec(b *testing.B) {
	req, _ := proto.Marshal(&api.KeepAliveRequest{LeaseSecret: make([]byte, 16), Seq: 123456})
	resp := &api.KeepAliveResponse{Seq: 123456, Ok: true, Ttl: durationpb.New(10 * time.Second), HeldTokens: []uint64{42}}
	for _, c := range []encoding.CodecV2{api.Codec, encoding.GetCodecV2("proto")} {
		b.Run(fmt.Sprintf("%T", c), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(req)}, new(api.KeepAliveRequest)); err != nil {
					b.Fatal(err)
				}
				out, err := c.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}

// TestCodecRefusesBadUTF8: a string that is not UTF-8 is refused, as proto
// refuses it (the generated code alone would let it through), while the
// renewal request, which has no string, takes the generated code.
func TestCodecRefusesBadUTF8(t *testing.T) {
	b := protowire.AppendTag(nil, 3, protowire.BytesType) // CreateLeaseRequest.owner
	b = protowire.AppendBytes(b, []byte{0xff, 0xfe})
	if err := proto.Unmarshal(b, &api.CreateLeaseRequest{}); err == nil {
		t.Fatal("proto took a bad string: the test's bytes are wrong")
	}
	if err := api.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &api.CreateLeaseRequest{}); err == nil {
		t.Fatal("the codec took an owner that is not UTF-8")
	}
	if err := api.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &api.AcquireRequest{}); err == nil { // field 3 of Acquire is a string too
		t.Fatal("the codec took a lock name that is not UTF-8")
	}
}
