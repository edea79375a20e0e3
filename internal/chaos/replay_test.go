package chaos

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
)

// TestReplayedProclaims: a replayed Put to an election's key joins the
// history as one proclaim per attempt, each with the outcome its answer
// allows. The replayer re-sends while the answer is UNAVAILABLE — which a
// member also answers when its leadership ended after it appended the
// entry (the write may land) — so an attempt answered so is an operation
// of unknown outcome of its own: two attempts that both land are two
// writes at two moments (a1, a2, a1 within one term is then legal), and a
// last attempt refused as stale does not make an earlier one harmless.
func TestReplayedProclaims(t *testing.T) {
	put := func(key string) capture {
		b, err := proto.Marshal(&api.PutRequest{RequestId: make([]byte, 16), Key: key, Value: []byte("v"), Token: 3})
		if err != nil {
			t.Fatal(err)
		}
		return capture{method: methodPut, req: b}
	}
	unavailable := status.Error(codes.Unavailable, "leadership lost after the entry was appended")
	stale := status.Error(codes.FailedPrecondition, "stale token")
	for _, tt := range []struct {
		name string
		key  string
		errs []error
		want []string // the outcome of each attempt's proclaim; none for another key
	}{
		{"written", electionName(0), []error{nil}, []string{OK}},
		{"refused", electionName(1), []error{stale}, []string{Stale}},
		{"written after a member was down", electionName(0), []error{unavailable, nil}, []string{Unknown, OK}},
		{"never answered", electionName(0), []error{unavailable, unavailable}, []string{Unknown, Unknown}},
		{"refused after an attempt that may have written", electionName(0), []error{unavailable, stale}, []string{Unknown, Stale}},
		{"another key", "lock-1", []error{nil}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := make([]int64, len(tt.errs))
			for i := range calls {
				calls[i] = int64(10 * (i + 1))
			}
			ops := replayedProclaims(put(tt.key), calls, tt.errs)
			if len(ops) != len(tt.want) {
				t.Fatalf("%d proclaims, want %d: %+v", len(ops), len(tt.want), ops)
			}
			for i, o := range ops {
				if o.Outcome != tt.want[i] || o.Token != 3 || o.Value != "v" || o.Lock != tt.key || o.Kind != "proclaim" || o.Call != calls[i] {
					t.Fatalf("attempt %d: got %+v, want a proclaim of %q (token 3, value v, call %d) with outcome %s", i, o, tt.key, calls[i], tt.want[i])
				}
				if tt.want[i] == Unknown && !o.Open() {
					t.Fatalf("attempt %d: an unknown outcome with a return: %+v", i, o)
				}
			}
		})
	}
}
