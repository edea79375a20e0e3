package histcheck

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func put(client int, call, ret int64, key, value string, token uint64, out KVOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: KVInput{Key: key, Put: true, Value: value, Token: token}, Output: out}
}

func get(client int, call, ret int64, key string, out KVOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: KVInput{Key: key}, Output: out}
}

func TestFencedKV(t *testing.T) {
	ok := KVOutput{}
	for _, tt := range []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"B writes, paused A refused", []porcupine.Operation{
			put(0, 0, 1, "k", "B", 34, ok),
			put(1, 2, 3, "k", "A", 33, KVOutput{Stale: true, Token: 34}),
			get(2, 4, 5, "k", KVOutput{Found: true, Value: "B", Token: 34}),
		}, true},
		{"a stale write accepted after a newer one (the lost update)", []porcupine.Operation{
			put(0, 0, 1, "k", "B", 34, ok),
			put(1, 2, 3, "k", "A", 33, ok),
		}, false},
		{"a read of a value overwritten before it began", []porcupine.Operation{
			put(0, 0, 1, "k", "A", 1, ok),
			put(0, 2, 3, "k", "B", 2, ok),
			get(1, 4, 5, "k", KVOutput{Found: true, Value: "A", Token: 1}),
		}, false},
		{"concurrent writes in either order", []porcupine.Operation{
			put(0, 0, 10, "k", "A", 1, ok),
			put(1, 1, 9, "k", "B", 2, ok),
			get(2, 11, 12, "k", KVOutput{Found: true, Value: "B", Token: 2}),
		}, true},
		{"an unknown put may land later", []porcupine.Operation{
			put(0, 0, math.MaxInt64, "k", "A", 5, KVOutput{Unknown: true}),
			get(1, 1, 2, "k", KVOutput{}),
			get(1, 3, 4, "k", KVOutput{Found: true, Value: "A", Token: 5}),
		}, true},
		{"a refusal that names the wrong highest token", []porcupine.Operation{
			put(0, 0, 1, "k", "B", 34, ok),
			put(1, 2, 3, "k", "A", 33, KVOutput{Stale: true, Token: 40}),
		}, false},
		{"keys are independent", []porcupine.Operation{
			put(0, 0, 1, "a", "x", 9, ok),
			put(1, 2, 3, "b", "y", 1, ok),
		}, true},
	} {
		if got := porcupine.CheckOperations(FencedKV, tt.h); got != tt.want {
			t.Errorf("%s: linearizable=%v, want %v", tt.name, got, tt.want)
		}
	}
}
