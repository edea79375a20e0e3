package node

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/histcheck"
)

// simChecker collects what the nodes applied and what the clients were told,
// and checks the safety properties:
//   - State Machine Safety (and so Log Matching): every node applies the same
//     entry, with the same results, at each index, across restarts;
//   - Leader Completeness / no acknowledged write lost: every entry a client
//     was told committed is the entry at its index on every node, and every
//     member has applied it by the end;
//   - tokens are unique and increase in commit order; one holder per lock;
//     no grant to a lease that has ended; no call takes effect twice;
//   - the clients' history of locks and fenced writes is linearizable;
//   - Election Safety: at most one node leads a term (a vote lost in a
//     crash lets a node vote twice in a term, and two nodes lead it).
type simChecker struct {
	s       *sim
	errs    []string
	canon   map[uint64]*applyRecord // index → the entry as first applied
	leaders map[uint64]string       // term → the node that led it
	votes   map[string]termVote     // node → the last vote it granted
	acks    []ackRecord
	history []porcupine.Operation
}

type applyRecord struct {
	node    string
	cmds    []fsm.Command
	data    string // encoded commands
	results string
	res     []fsm.Result
}

type callKey struct {
	lease fsm.LeaseID
	seq   uint64
}

type ackRecord struct {
	node  string
	index uint64
	data  string
}

func newSimChecker(s *sim) *simChecker {
	return &simChecker{s: s, canon: map[uint64]*applyRecord{}, leaders: map[uint64]string{}, votes: map[string]termVote{}}
}

// sent records a vote n granted (a MsgVoteResp that left it): n promised
// not to vote for another node in that term, across crashes.
func (k *simChecker) sent(n *simNode, m *raftpb.Message) {
	if m.GetType() == raftpb.MsgVoteResp && !m.GetReject() {
		k.votes[n.name] = termVote{m.GetTerm(), m.GetTo()}
	}
}

// started checks that n, starting from its log after a crash, still knows
// of the last vote it granted: a later term, or that term and that vote.
func (k *simChecker) started(n *simNode) {
	v, ok := k.votes[n.name]
	if !ok {
		return
	}
	hs, _, _ := n.log.InitialState()
	if hs.GetTerm() < v.term || hs.GetTerm() == v.term && hs.GetVote() != v.vote {
		k.fail("%s restarts at term %d with vote %x, but it granted its vote in term %d to %x: the vote was lost (it may vote twice in the term)",
			n.name, hs.GetTerm(), hs.GetVote(), v.term, v.vote)
	}
}

// led records that n leads its current term, if it does.
func (k *simChecker) led(n *simNode) {
	st := n.c.rn.BasicStatus()
	if st.RaftState != raft.StateLeader {
		return
	}
	term := st.HardState.GetTerm()
	first, ok := k.leaders[term]
	switch {
	case !ok:
		k.leaders[term] = n.name
	case first != n.name:
		k.fail("election safety: %s and %s both led term %d", first, n.name, term)
	}
}

func (k *simChecker) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	k.errs = append(k.errs, msg)
	k.s.logf("VIOLATION: %s", msg)
}

func (k *simChecker) failed() bool { return len(k.errs) > 0 }

func (k *simChecker) applied(n *simNode, index uint64, cmds []fsm.Command, results []fsm.Result) {
	rec := &applyRecord{node: n.name, cmds: slices.Clone(cmds), data: string(fsm.EncodeBatch(nil, cmds)),
		results: fmt.Sprintf("%+v", results), res: slices.Clone(results)}
	first, ok := k.canon[index]
	if !ok {
		k.canon[index] = rec
		return
	}
	if first.data != rec.data {
		k.fail("state machine safety: index %d applied as %v on %s but as %v on %s", index, kinds(first.cmds), first.node, kinds(cmds), n.name)
		return
	}
	if first.results != rec.results {
		k.fail("index %d gave different results on %s and %s:\n  %s\n  %s", index, first.node, n.name, first.results, rec.results)
	}
}

func (k *simChecker) restored(n *simNode) { k.s.logf("%s restored a snapshot", n.name) }

func kinds(cmds []fsm.Command) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, c.Kind.String()+" "+c.Name)
	}
	return out
}

// acked records that node told a client that cmd committed at index.
func (k *simChecker) acked(n *simNode, index uint64, cmd fsm.Command, _ fsm.Result) {
	if index == 0 {
		k.fail("%s acknowledged %v without committing it (no log index: answered from memory)", n.name, cmd.Kind)
		return
	}
	a := ackRecord{node: n.name, index: index, data: string(fsm.EncodeBatch(nil, []fsm.Command{cmd}))}
	k.acks = append(k.acks, a)
	if rec, ok := k.canon[index]; ok && rec.data != a.data {
		k.fail("acknowledged write lost: %s acknowledged %v at index %d, but %s applied %v there", n.name, cmd.Kind, index, rec.node, kinds(rec.cmds))
	}
}

// final runs the checks that need the whole run.
func (k *simChecker) final() {
	if k.failed() {
		return
	}
	s := k.s
	// Every acknowledged entry is in place, and every member has applied it.
	var maxAck uint64
	for _, a := range k.acks {
		rec, ok := k.canon[a.index]
		switch {
		case !ok:
			k.fail("acknowledged write at index %d (by %s) was never applied by anyone else", a.index, a.node)
		case rec.data != a.data:
			k.fail("acknowledged write lost: %s acknowledged index %d, which holds %v", a.node, a.index, kinds(rec.cmds))
		}
		maxAck = max(maxAck, a.index)
	}
	// The members are those of the configuration the most advanced node applied.
	var top *simNode
	for _, n := range s.nodes {
		if n.c != nil && (top == nil || n.c.applied > top.c.applied) {
			top = n
		}
	}
	if top == nil {
		k.fail("no node is up at the end")
		return
	}
	for _, n := range s.nodes {
		if n.c == nil || !slices.Contains(top.c.cs.GetVoters(), n.id) && !slices.Contains(top.c.cs.GetLearners(), n.id) {
			continue
		}
		if n.c.applied < maxAck {
			k.fail("%s applied only up to %d after the quiet period; index %d was acknowledged", n.name, n.c.applied, maxAck)
		}
	}
	// Tokens, holders, leases and calls, in commit order.
	var last uint64
	holder := map[string]fsm.LeaseID{}
	live := map[fsm.LeaseID]bool{}
	effects := map[callKey]uint64{}
	for _, index := range slices.Sorted(maps.Keys(k.canon)) {
		rec := k.canon[index]
		for i, r := range rec.res {
			c := rec.cmds[i]
			for _, e := range r.Events {
				switch e.Kind {
				case fsm.LeaseStarted:
					live[e.Lease] = true
				case fsm.LeaseEnded:
					delete(live, e.Lease)
				case fsm.Granted:
					if e.Token <= last {
						k.fail("token %d granted at index %d is not above the last one, %d", e.Token, index, last)
					}
					last = max(last, e.Token)
					if h, ok := holder[e.Name]; ok {
						k.fail("lock %s granted at index %d while lease %v holds it", e.Name, index, h)
					}
					if !live[e.Lease] {
						k.fail("lock %s granted at index %d to lease %v, which has ended", e.Name, index, e.Lease)
					}
					holder[e.Name] = e.Lease
				case fsm.Released:
					delete(holder, e.Name)
				}
			}
			tookEffect := slices.ContainsFunc(r.Events, func(e fsm.Event) bool { return e.Kind == fsm.Granted || e.Kind == fsm.Released })
			if c.Seq != 0 && tookEffect {
				key := callKey{c.Lease, c.Seq}
				if at, ok := effects[key]; ok && at != index {
					k.fail("call %d of lease %v took effect twice: at index %d and again at %d (%v %s)", c.Seq, c.Lease, at, index, c.Kind, c.Name)
				}
				effects[key] = index
			}
		}
	}
	// The clients' history.
	var locks, kv []porcupine.Operation
	for _, op := range k.history {
		if _, ok := op.Input.(histcheck.LockInput); ok {
			locks = append(locks, op)
		} else {
			kv = append(kv, op)
		}
	}
	if res := porcupine.CheckOperationsTimeout(histcheck.Locks.ToModel(), locks, 20*time.Second); res == porcupine.Illegal {
		k.fail("the lock history (%d calls) is not linearizable", len(locks))
	}
	if res := porcupine.CheckOperationsTimeout(histcheck.FencedKV, kv, 20*time.Second); res == porcupine.Illegal {
		k.fail("the fenced key-value history (%d calls) is not linearizable", len(kv))
	}
}
