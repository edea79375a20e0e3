package histcheck

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func electionOp(client int, call, ret int64, in ElectionInput, out ElectionOutput) porcupine.Operation {
	in.Name = "E"
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

func TestElections(t *testing.T) {
	campaign := func(v string) ElectionInput { return ElectionInput{Op: Campaign, Value: v} }
	proclaim := func(tok uint64, v string) ElectionInput { return ElectionInput{Op: Proclaim, Token: tok, Value: v} }
	resign := func(tok uint64) ElectionInput { return ElectionInput{Op: Resign, Token: tok} }
	read := ElectionInput{Op: ReadLeader}
	won := func(tok uint64) ElectionOutput { return ElectionOutput{OK: true, Token: tok} }
	leader := func(v string, tok uint64) ElectionOutput { return ElectionOutput{OK: true, Value: v, Token: tok} }
	ok, none, deposed, unknown := ElectionOutput{OK: true}, ElectionOutput{}, ElectionOutput{Deposed: true}, ElectionOutput{Unknown: true}
	for _, tt := range []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"elected, proclaimed, resigned, elected again", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(2, 2, 3, read, leader("a", 1)),
			electionOp(0, 4, 5, proclaim(1, "a2"), ok),
			electionOp(2, 6, 7, read, leader("a2", 1)),
			electionOp(0, 8, 9, resign(1), ok),
			electionOp(2, 10, 11, read, none),
			electionOp(1, 12, 13, campaign("b"), won(2)),
			electionOp(2, 14, 15, read, leader("b", 2)),
		}, true},
		{"two leaders of one term", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(1, 2, 3, campaign("b"), won(1)),
		}, false},
		{"a later term with a lower token", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(3)),
			electionOp(1, 2, 3, campaign("b"), won(2)),
		}, false},
		{"a read of the old value after a Proclaim", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(0, 2, 3, proclaim(1, "a2"), ok),
			electionOp(2, 4, 5, read, leader("a", 1)),
		}, false},
		{"a read of a deposed leader", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(1, 2, 3, campaign("b"), won(2)),
			electionOp(2, 4, 5, read, leader("a", 1)),
		}, false},
		{"a term that comes back after no leader was read", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(2, 2, 3, read, none),
			electionOp(2, 4, 5, read, leader("a", 1)),
		}, false},
		{"a leader's lease may end at any moment", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(2, 2, 3, read, none),
			electionOp(0, 4, 5, proclaim(1, "a2"), ok), // its Put still passes: no newer term wrote
			electionOp(1, 6, 7, campaign("b"), won(2)),
		}, true},
		{"a deposed leader's Proclaim is refused", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(1, 2, 3, campaign("b"), won(2)),
			electionOp(0, 4, 5, proclaim(1, "a2"), deposed),
			electionOp(2, 6, 7, read, leader("b", 2)),
		}, true},
		{"a deposed leader's Proclaim accepted", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(1, 2, 3, campaign("b"), won(2)),
			electionOp(0, 4, 5, proclaim(1, "a2"), ok),
		}, false},
		{"a Proclaim refused with no newer term", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(0, 2, 3, proclaim(1, "a2"), deposed),
		}, false},
		{"concurrent campaigns in either order", []porcupine.Operation{
			electionOp(0, 0, 10, campaign("a"), won(2)),
			electionOp(1, 1, 9, campaign("b"), won(1)),
			electionOp(2, 11, 12, read, leader("a", 2)),
		}, true},
		{"an unknown campaign explains a leader read", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(1, 2, math.MaxInt64, campaign("b"), unknown),
			electionOp(2, 4, 5, read, leader("b", 3)),
			electionOp(0, 6, 7, proclaim(1, "a2"), deposed),
			electionOp(3, 8, 9, campaign("c"), won(4)),
		}, true},
		{"an unknown campaign does not explain another value", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(1, 2, math.MaxInt64, campaign("b"), unknown),
			electionOp(2, 4, 5, read, leader("x", 3)),
		}, false},
		// A Proclaim whose first attempt was written (and read) but whose
		// answer was lost, and whose retry met the newer leader's write: the
		// client reports it unknown (ErrIndeterminate with ErrDeposed), and
		// the history is legal. Reported as a plain refusal, as it was, the
		// read of its value has no write to explain it.
		{"a proclaim written, read, then refused on its retry: unknown", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(0, 2, math.MaxInt64, proclaim(1, "a2"), unknown),
			electionOp(2, 3, 4, read, leader("a2", 1)),
			electionOp(1, 5, 6, campaign("b"), won(2)),
			electionOp(2, 7, 8, read, leader("b", 2)),
		}, true},
		{"a proclaim written, read, then refused on its retry: reported deposed", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(0, 2, 9, proclaim(1, "a2"), deposed),
			electionOp(2, 3, 4, read, leader("a2", 1)),
			electionOp(1, 5, 6, campaign("b"), won(2)),
			electionOp(2, 7, 8, read, leader("b", 2)),
		}, false},
		// A candidate that won the lock but had not written its value yet
		// is no leader: the read between finds none, and then finds it.
		{"a winner read as no leader before its value is written", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(0, 2, 3, resign(1), ok),
			electionOp(1, 4, 9, campaign("b"), won(2)),
			electionOp(2, 5, 6, read, none),
			electionOp(2, 7, 8, read, leader("b", 2)),
		}, true},
		{"a leader read after its resignation", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(1)),
			electionOp(0, 2, 3, resign(1), ok),
			electionOp(2, 4, 5, read, leader("a", 1)),
		}, false},
		{"after an unknown campaign took effect, terms still rise", []porcupine.Operation{
			electionOp(0, 0, 1, campaign("a"), won(3)),
			electionOp(1, 2, math.MaxInt64, campaign("b"), unknown),
			electionOp(2, 4, 5, read, leader("b", 5)),
			electionOp(3, 6, 7, campaign("c"), won(4)),
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Elections.ToModel(), tt.h); got != tt.want {
				t.Fatalf("linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}
