package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// randomState is a large state from a fixed seed, built through commands:
// leases (with owners, and identities if withIdentity), mutexes held and
// waited for, semaphores and read-write locks if withPermits, expiries
// into lock-delay, renewals, ticks and fenced keys. The same seed gives the
// same state in every fence, so its encoding can be compared with one
// recorded from an older encoder.
func randomState(t testing.TB, seed uint64, leases int, withIdentity, withPermits bool) *State {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	s := New()
	ids := make([]LeaseID, 0, leases)
	req := uint64(0)
	next := func() RequestID {
		req++
		var r RequestID
		r[0], r[1], r[2], r[3], r[15] = byte(req), byte(req>>8), byte(req>>16), byte(req>>24), 0xaa
		return r
	}
	apply := func(c Command) Result {
		r := s.Apply(&c)
		if r.Code != OK && r.Code != Queued && r.Code != LockHeld {
			t.Fatalf("%v: %v %s", c.Kind, r.Code, r.Reason)
		}
		return r
	}
	seq := map[LeaseID]uint64{}
	for i := range leases {
		var id LeaseID
		for j := range id {
			id[j] = byte(rng.Uint32())
		}
		c := Command{Kind: KindCreateLease, RequestID: next(), Lease: id,
			TTL: time.Duration(1+rng.IntN(3600)) * time.Second, Owner: fmt.Sprintf("owner-%d", rng.IntN(1000))}
		if withIdentity && i%3 == 0 {
			c.Identity = fmt.Sprintf("svc-%d", rng.IntN(50))
		}
		apply(c)
		ids = append(ids, id)
		switch rng.IntN(20) {
		case 0, 1: // a mutex, held or waited for
			seq[id]++
			apply(Command{Kind: KindAcquire, RequestID: next(), Lease: id, Seq: seq[id], Ack: seq[id],
				Name: fmt.Sprintf("lock-%d", rng.IntN(leases/4+1)), Wait: true, LockDelay: time.Duration(rng.IntN(3)) * time.Second})
		case 2:
			if withPermits {
				seq[id]++
				apply(Command{Kind: KindAcquire, RequestID: next(), Lease: id, Seq: seq[id], Ack: seq[id],
					Name: fmt.Sprintf("sem-%d", rng.IntN(leases/40+1)), Wait: true, Permits: 3, LockDelay: time.Second})
			}
		case 3:
			if withPermits {
				seq[id]++
				apply(Command{Kind: KindAcquire, RequestID: next(), Lease: id, Seq: seq[id], Ack: seq[id],
					Name: fmt.Sprintf("rw-%d", rng.IntN(leases/40+1)), Wait: true, Shared: rng.IntN(2) == 0})
			}
		case 4:
			apply(Command{Kind: KindTick, Elapsed: time.Duration(rng.IntN(5000)) * time.Millisecond})
		case 5:
			apply(Command{Kind: KindRenew, Lease: ids[rng.IntN(len(ids))]})
		case 6:
			apply(Command{Kind: KindPut, RequestID: next(), Name: fmt.Sprintf("key-%d", rng.IntN(500)), Value: bytes.Repeat([]byte{byte(i)}, rng.IntN(200)), Token: s.Token()})
		}
	}
	for range leases / 20 { // expiries: some locks enter lock-delay, queues move
		id := ids[rng.IntN(len(ids))]
		if _, ok := s.Lease(id); ok {
			l, _ := s.Lease(id)
			apply(Command{Kind: KindExpire, Lease: id, Renewals: l.Renewals})
		}
	}
	apply(Command{Kind: KindSetNode, Name: "n1", Addr: "127.0.0.1:7300"})
	return s
}

// chunkRecorder keeps the chunks Encode hands it and the size of the
// largest.
type chunkRecorder struct {
	bytes.Buffer
	writes, largest int
}

func (w *chunkRecorder) emit(b []byte) error {
	w.writes++
	w.largest = max(w.largest, len(b))
	_, err := w.Write(b)
	return err
}

// TestEncodeStreamsTheSameBytes: Encode writes, in bounded chunks, the very
// bytes the encoder wrote before it streamed. The digests are literals,
// recorded from Marshal at the commit before Encode (f8e4fed)
// on the same seeded states: one in the oldest version (no identities, no
// semaphores) and one in the newest.
func TestEncodeStreamsTheSameBytes(t *testing.T) {
	for _, tt := range []struct {
		name                string
		identity, permits   bool
		wantVersion         byte
		wantSHA256          string
		wantLen, wantChunks int
	}{
		{"version 3", false, false, 3, "25728d4457d535b582d4ab7345d290fa0cc5bf71529a3bc88ec2fd0ee544ceec", 1923914, 29},
		{"version 6", true, true, 6, "40a44a958d040b90ffea793ba10aca03d4ef50ddba67c200371a52ebce3616c7", 2169538, 33},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := randomState(t, 18, 30_000, tt.identity, tt.permits)
			var w chunkRecorder
			if err := s.Encode(w.emit); err != nil {
				t.Fatal(err)
			}
			b := w.Bytes()
			sum := sha256.Sum256(b)
			t.Logf("%d bytes in %d writes (largest %d), version %d, sha256 %s", len(b), w.writes, w.largest, b[0], hex.EncodeToString(sum[:]))
			if b[0] != tt.wantVersion || hex.EncodeToString(sum[:]) != tt.wantSHA256 || len(b) != tt.wantLen {
				t.Fatalf("encoding: version %d, %d bytes, sha256 %x; want version %d, %d bytes, sha256 %s",
					b[0], len(b), sum, tt.wantVersion, tt.wantLen, tt.wantSHA256)
			}
			if w.writes < tt.wantChunks || w.largest > encodeChunk+4<<10 {
				t.Fatalf("%d writes, largest %d bytes: want at least %d, each about %d", w.writes, w.largest, tt.wantChunks, encodeChunk)
			}
			if m := s.Marshal(nil); !bytes.Equal(m, b) {
				t.Fatal("Marshal and Encode differ")
			}
		})
	}
}

// TestEncodeWriteError: Encode stops at emit's first error and returns it.
func TestEncodeWriteError(t *testing.T) {
	s := randomState(t, 18, 5_000, false, false)
	boom := errors.New("disk full")
	calls := 0
	emit := func([]byte) error {
		if calls++; calls > 1 {
			return boom
		}
		return nil
	}
	if err := s.Encode(emit); !errors.Is(err, boom) {
		t.Fatalf("Encode: %v, want the write error", err)
	}
	if calls != 2 {
		t.Fatalf("%d chunks handed on, want 2 (one taken, one refused, none after)", calls)
	}
}
