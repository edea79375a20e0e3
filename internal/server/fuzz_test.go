package server

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// FuzzRequestValidation drives the API boundary: wire bytes decoded as each
// mutating request, and raw field values that a client library in another
// language could send. Validation must never panic, must refuse with
// InvalidArgument, and whatever it accepts must be a command the fsm accepts.
func FuzzRequestValidation(f *testing.F) {
	l := limits{minTTL: time.Second, maxTTL: time.Hour, lockDelay: 5 * time.Second}
	seed, _ := proto.Marshal(&api.AcquireRequest{RequestId: make([]byte, 16), LeaseSecret: []byte("0123456789abcdef"), Name: "jobs/nightly", Wait: true})
	f.Add(seed, "jobs/nightly", []byte("0123456789abcdef"), int64(30e9), uint64(1))
	f.Add([]byte{0x0a, 0x01}, "\xff", []byte{1}, int64(-1), uint64(0))
	f.Add([]byte{}, "a\x00b", []byte{}, int64(1<<62), uint64(1<<63))
	f.Fuzz(func(t *testing.T, wire []byte, name string, lease []byte, nanos int64, token uint64) {
		check := func(what string, build func() (func() error, error)) {
			fsmErr, err := build()
			if err != nil {
				if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
					t.Fatalf("%s refused with %v, want InvalidArgument with a message", what, err)
				}
				return
			}
			if e := fsmErr(); e != nil {
				t.Fatalf("%s passed the API but the fsm refuses it: %v", what, e)
			}
		}
		var acq api.AcquireRequest
		if proto.Unmarshal(wire, &acq) == nil {
			check("wire acquire", func() (func() error, error) { c, err := l.acquire(&acq); return c.Validate, err })
		}
		var cl api.CreateLeaseRequest
		if proto.Unmarshal(wire, &cl) == nil {
			check("wire create-lease", func() (func() error, error) { c, err := l.createLease(&cl); c.Lease[0] = 1; return c.Validate, err })
		}
		var put api.PutRequest
		if proto.Unmarshal(wire, &put) == nil {
			check("wire put", func() (func() error, error) { c, err := l.put(&put); return c.Validate, err })
		}
		d := &durationpb.Duration{Seconds: nanos / 1e9, Nanos: int32(nanos % 1e9)}
		check("acquire", func() (func() error, error) {
			c, err := l.acquire(&api.AcquireRequest{LeaseSecret: lease, Name: name, LockDelay: d})
			return c.Validate, err
		})
		check("create-lease", func() (func() error, error) {
			c, err := l.createLease(&api.CreateLeaseRequest{RequestId: lease, Ttl: d, Owner: name})
			c.Lease[0] = 1 // the server fills in a random id
			return c.Validate, err
		})
		check("put", func() (func() error, error) {
			c, err := l.put(&api.PutRequest{RequestId: lease, Key: name, Value: wire, Token: token})
			return c.Validate, err
		})
		check("release", func() (func() error, error) {
			c, err := l.release(&api.ReleaseRequest{LeaseSecret: lease, Name: name})
			return c.Validate, err
		})
	})
}
