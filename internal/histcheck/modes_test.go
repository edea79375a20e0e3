package histcheck

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func modeOp(client int, call, ret int64, in ModeInput, out ModeOutput) porcupine.Operation {
	in.Name = "L"
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

func TestModes(t *testing.T) {
	sem := func(op LockOp, token uint64) ModeInput { return ModeInput{Op: op, Permits: 2, Token: token} }
	read := ModeInput{Op: Acquire, Permits: 1, Shared: true}
	write := ModeInput{Op: Acquire, Permits: 1}
	rwStatus := ModeInput{Op: Status, Permits: 1}
	permit := func(tok uint64, slot int) ModeOutput {
		return ModeOutput{OK: true, Grant: Grant{Token: tok, Slot: slot}}
	}
	reader := func(tok uint64) ModeOutput { return ModeOutput{OK: true, Grant: Grant{Token: tok, Shared: true}} }
	writer := func(tok uint64) ModeOutput { return ModeOutput{OK: true, Grant: Grant{Token: tok}} }
	held := func(gs ...Grant) ModeOutput { return ModeOutput{Held: gs} }
	ok, unknown := ModeOutput{OK: true}, ModeOutput{Unknown: true}
	for _, tt := range []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"two permits, a release, the freed slot again", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(1, 0)),
			modeOp(1, 2, 3, sem(Acquire, 0), permit(2, 1)),
			modeOp(2, 4, 5, sem(Status, 0), held(Grant{1, 0, false}, Grant{2, 1, false})),
			modeOp(0, 6, 7, sem(Release, 1), ok),
			modeOp(2, 8, 9, sem(Acquire, 0), permit(3, 0)),
			modeOp(3, 10, 11, sem(Status, 0), held(Grant{2, 1, false}, Grant{3, 0, false})),
		}, true},
		{"a slot beyond the count", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(1, 2)),
		}, false},
		{"a read of more grants than permits", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(1, 0)),
			modeOp(1, 2, 3, sem(Acquire, 0), permit(2, 1)),
			modeOp(2, 4, 5, sem(Acquire, 0), permit(3, 0)),
			modeOp(3, 6, 7, sem(Status, 0), held(Grant{1, 0, false}, Grant{2, 1, false}, Grant{3, 0, false})),
		}, false},
		{"a read of a permit whose slot was granted again", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(1, 0)),
			modeOp(1, 2, 3, sem(Acquire, 0), permit(2, 0)),
			modeOp(2, 4, 5, sem(Status, 0), held(Grant{1, 0, false})),
		}, false},
		{"a release of a permit whose slot was granted again", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(1, 0)),
			modeOp(1, 2, 3, sem(Acquire, 0), permit(2, 0)),
			modeOp(0, 4, 5, sem(Release, 1), ok),
		}, false},
		{"a permit token repeated", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(4, 0)),
			modeOp(1, 2, 3, sem(Acquire, 0), permit(4, 1)),
		}, false},
		{"readers together, then a writer with a larger token", []porcupine.Operation{
			modeOp(0, 0, 1, read, reader(1)),
			modeOp(1, 2, 3, read, reader(2)),
			modeOp(2, 4, 5, rwStatus, held(Grant{1, 0, true}, Grant{2, 0, true})),
			modeOp(0, 6, 7, ModeInput{Op: Release, Permits: 1, Token: 1}, ok),
			modeOp(1, 8, 9, ModeInput{Op: Release, Permits: 1, Token: 2}, ok),
			modeOp(3, 10, 11, write, writer(3)),
			modeOp(2, 12, 13, rwStatus, held(Grant{3, 0, false})),
		}, true},
		{"a writer's token below an earlier reader's", []porcupine.Operation{
			modeOp(0, 0, 1, read, reader(5)),
			modeOp(1, 2, 3, write, writer(4)),
		}, false},
		{"a read of a writer beside a reader", []porcupine.Operation{
			modeOp(0, 0, 1, read, reader(1)),
			modeOp(1, 2, 3, write, writer(2)),
			modeOp(2, 4, 5, rwStatus, held(Grant{1, 0, true}, Grant{2, 0, false})),
		}, false},
		{"a reader's grant reported exclusive", []porcupine.Operation{
			modeOp(0, 0, 1, read, writer(1)),
		}, false},
		{"a read of a reader after a writer was granted", []porcupine.Operation{
			modeOp(0, 0, 1, read, reader(1)),
			modeOp(1, 2, 3, write, writer(2)),
			modeOp(2, 4, 5, rwStatus, held(Grant{1, 0, true})),
		}, false},
		{"an acquire of unknown outcome that did take effect", []porcupine.Operation{
			modeOp(0, 0, math.MaxInt64, sem(Acquire, 0), unknown),
			modeOp(1, 2, 3, sem(Status, 0), held(Grant{1, 0, false})),
			modeOp(1, 4, 5, sem(Acquire, 0), permit(2, 1)),
		}, true},
		{"a read of an unknown grant in a slot taken", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(1, 0)),
			modeOp(1, 2, math.MaxInt64, sem(Acquire, 0), unknown),
			modeOp(2, 4, 5, sem(Status, 0), held(Grant{1, 0, false}, Grant{2, 0, false})),
		}, false},
		{"a read of an unknown grant in a free slot", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(1, 0)),
			modeOp(1, 2, math.MaxInt64, sem(Acquire, 0), unknown),
			modeOp(2, 4, 5, sem(Status, 0), held(Grant{1, 0, false}, Grant{2, 1, false})),
		}, true},
		// An acquire that began after token 10 was granted gets a token
		// above 10 if it takes effect: a read of its grant with token 3 is
		// a grant nobody was given.
		{"a read of an unknown grant with a token below one granted before it began", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(10, 0)),
			modeOp(1, 2, math.MaxInt64, sem(Acquire, 0), unknown),
			modeOp(2, 4, 5, sem(Status, 0), held(Grant{10, 0, false}, Grant{3, 1, false})),
		}, false},
		{"a read of an unknown grant with a token above one granted before it began", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(10, 0)),
			modeOp(1, 2, math.MaxInt64, sem(Acquire, 0), unknown),
			modeOp(2, 4, 5, sem(Status, 0), held(Grant{10, 0, false}, Grant{13, 1, false})),
		}, true},
		// One acquire of unknown outcome makes at most one grant: a read of
		// two grants nobody was told of is a grant made twice.
		{"a read of two unknown grants after one unknown acquire", []porcupine.Operation{
			modeOp(1, 0, math.MaxInt64, sem(Acquire, 0), unknown),
			modeOp(2, 2, 3, sem(Status, 0), held(Grant{1, 0, false}, Grant{2, 1, false})),
		}, false},
		{"a read of two unknown grants after two unknown acquires", []porcupine.Operation{
			modeOp(0, 0, math.MaxInt64, sem(Acquire, 0), unknown),
			modeOp(1, 0, math.MaxInt64, sem(Acquire, 0), unknown),
			modeOp(2, 2, 3, sem(Status, 0), held(Grant{1, 0, false}, Grant{2, 1, false})),
		}, true},
		{"readers of unknown outcome: two unknown readers after one", []porcupine.Operation{
			modeOp(1, 0, math.MaxInt64, read, unknown),
			modeOp(2, 2, 3, rwStatus, held(Grant{1, 0, true}, Grant{2, 0, true})),
		}, false},
		{"a read of a grant nobody was given", []porcupine.Operation{
			modeOp(0, 0, 1, sem(Acquire, 0), permit(1, 0)),
			modeOp(1, 2, 3, sem(Status, 0), held(Grant{1, 0, false}, Grant{7, 1, false})),
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Modes.ToModel(), tt.h); got != tt.want {
				t.Fatalf("linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}
