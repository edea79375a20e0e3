package api

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Codec is the gRPC codec of fence's server and Go client. It speaks gRPC's
// standard "proto" encoding, byte for byte what the default codec sends, but
// marshals fence's own messages with the code protoc-gen-go-vtproto
// generated for them (fence_vtproto.pb.go) instead
// of protobuf's reflection: on a leader answering renewals, the default
// codec's Marshal and Unmarshal were 17 % of the process's CPU. Messages
// without that code (gRPC health, reflection) go through proto as before.
//
// The generated Unmarshal does not check that strings are UTF-8, as proto3
// requires and proto does: a message with a string field anywhere in it is
// read by proto, so a name, owner or reason that is not UTF-8 is refused
// before fence sees it. The renewal messages have none.
//
// Unmarshal expects a new (zero) message, as gRPC always passes: the
// generated code merges into what a message already holds.
var Codec encoding.CodecV2 = codec{}

// vtMessage is what protoc-gen-go-vtproto generates on every message
// (features marshal, unmarshal and size).
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
}

type codec struct{}

// Name is gRPC's name of the protobuf encoding: peers see no difference.
func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return marshalProto(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if m, ok := v.(vtMessage); ok && !hasStrings(m.(proto.Message).ProtoReflect().Descriptor()) {
		return m.UnmarshalVT(buf.ReadOnlyData())
	}
	pm := messageOf(v)
	if pm == nil {
		return fmt.Errorf("api codec: cannot unmarshal into %T: not a protobuf message", v)
	}
	return proto.Unmarshal(buf.ReadOnlyData(), pm)
}

// marshalProto marshals a message without generated VT code with proto.
func marshalProto(v any) (mem.BufferSlice, error) {
	pm := messageOf(v)
	if pm == nil {
		return nil, fmt.Errorf("api codec: cannot marshal %T: not a protobuf message", v)
	}
	buf, err := proto.Marshal(pm)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
}

// stringy caches hasStrings by message name.
var stringy sync.Map // protoreflect.FullName → bool

// hasStrings reports whether a message of md can hold a string: a string
// field of its own, of a map, or of a message it holds.
func hasStrings(md protoreflect.MessageDescriptor) bool {
	if v, ok := stringy.Load(md.FullName()); ok {
		return v.(bool)
	}
	has := holdsString(md, map[protoreflect.FullName]bool{})
	stringy.Store(md.FullName(), has)
	return has
}

func holdsString(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if f.Kind() == protoreflect.StringKind || f.Message() != nil && holdsString(f.Message(), seen) {
			return true
		}
	}
	return false
}

func messageOf(v any) proto.Message {
	switch m := v.(type) {
	case protoadapt.MessageV2:
		return m
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m)
	}
	return nil
}
