package histcheck

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func lockOp(client int, call, ret int64, op LockOp, token uint64, out LockOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: LockInput{Name: "L", Op: op, Token: token}, Output: out}
}

func TestLocks(t *testing.T) {
	granted := func(tok uint64) LockOutput { return LockOutput{OK: true, Token: tok} }
	ok, refused, unknown := LockOutput{OK: true}, LockOutput{}, LockOutput{Unknown: true}
	for _, tt := range []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"grant, release, grant", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(1)),
			lockOp(0, 2, 3, Release, 1, ok),
			lockOp(1, 4, 5, Acquire, 0, granted(2)),
			lockOp(2, 6, 7, Status, 0, LockOutput{Token: 2}),
		}, true},
		{"a token repeated", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(5)),
			lockOp(1, 2, 3, Acquire, 0, granted(5)),
		}, false},
		{"a token lower than one granted before", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(5)),
			lockOp(1, 2, 3, Acquire, 0, granted(4)),
		}, false},
		{"concurrent grants in either order", []porcupine.Operation{
			lockOp(0, 0, 10, Acquire, 0, granted(5)),
			lockOp(1, 1, 9, Acquire, 0, granted(4)),
		}, true},
		{"release by a holder that was replaced", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(1)),
			lockOp(1, 2, 3, Acquire, 0, granted(2)),
			lockOp(0, 4, 5, Release, 1, ok),
		}, false},
		{"release refused after an expiry", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(1)),
			lockOp(0, 2, 3, Release, 1, refused),
			lockOp(1, 4, 5, Status, 0, LockOutput{}),
		}, true},
		{"release refused locally while the server still holds it", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(1)),
			lockOp(0, 2, 3, Release, 1, refused),
			lockOp(1, 4, 5, Status, 0, LockOutput{Token: 1}),
		}, true},
		{"a read of a holder that was replaced", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(1)),
			lockOp(1, 2, 3, Acquire, 0, granted(2)),
			lockOp(2, 4, 5, Status, 0, LockOutput{Token: 1}),
		}, false},
		{"a read of a holder never granted", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(1)),
			lockOp(2, 4, 5, Status, 0, LockOutput{Token: 7}),
		}, false},
		{"an unknown acquire explains a read", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(1)),
			lockOp(1, 2, math.MaxInt64, Acquire, 0, unknown),
			lockOp(2, 4, 5, Status, 0, LockOutput{Token: 3}),
			lockOp(3, 6, 7, Acquire, 0, granted(4)),
		}, true},
		{"after an unknown acquire took effect, tokens still rise", []porcupine.Operation{
			lockOp(0, 0, 1, Acquire, 0, granted(3)),
			lockOp(1, 2, math.MaxInt64, Acquire, 0, unknown),
			lockOp(2, 4, 5, Status, 0, LockOutput{Token: 5}),
			lockOp(3, 6, 7, Acquire, 0, granted(4)),
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Locks.ToModel(), tt.h); got != tt.want {
				t.Fatalf("linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFencedKVClaim(t *testing.T) {
	claim := func(client int, call, ret int64, token uint64, out KVOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: KVInput{Key: "k", Put: true, Claim: true, Token: token}, Output: out}
	}
	ok := KVOutput{}
	if !porcupine.CheckOperations(FencedKV, []porcupine.Operation{
		put(0, 0, 1, "k", "5", 1, ok),
		claim(1, 2, 3, 2, ok),
		put(0, 4, 5, "k", "6", 1, KVOutput{Stale: true, Token: 2}),
		get(2, 6, 7, "k", KVOutput{Found: true, Value: "5", Token: 2}),
	}) {
		t.Fatal("a claim keeps the value and raises the token; the older writer is refused")
	}
	if porcupine.CheckOperations(FencedKV, []porcupine.Operation{
		put(0, 0, 1, "k", "5", 1, ok),
		claim(1, 2, 3, 2, ok),
		put(0, 4, 5, "k", "6", 1, ok),
	}) {
		t.Fatal("a write under an older token than a claim was accepted: must not be linearizable")
	}
}
