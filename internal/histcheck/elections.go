package histcheck

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// ElectionOp is what a call to an election did.
type ElectionOp uint8

// Election operations (client.Campaign, Leadership.Proclaim,
// Leadership.Resign, Client.Leader).
const (
	Campaign ElectionOp = iota + 1
	Proclaim
	Resign
	ReadLeader
)

// ElectionInput is one call to an election.
type ElectionInput struct {
	Name  string
	Op    ElectionOp
	Value string // Campaign, Proclaim
	Token uint64 // Proclaim, Resign: the term's token
}

// ElectionOutput is what the call returned.
type ElectionOutput struct {
	Unknown bool   // it failed in a way that may or may not have taken effect
	OK      bool   // Campaign: elected, value written; Proclaim: written; ReadLeader: a leader (else none)
	Deposed bool   // Proclaim: refused, a newer term wrote the value
	Token   uint64 // Campaign: the term won; ReadLeader: the leader's
	Value   string // ReadLeader: the leader's value
}

type electionState struct {
	max    uint64 // the highest term known to have been won (a lower bound if vague)
	term   uint64 // the token the value was last written with
	value  string
	leads  bool // term's leader still holds the lock: a read may report it
	vague  bool // the value was written by a campaign of unknown outcome, with an unknown term > max
	vagueV string
}

// Elections is the model of one election per name (client.Campaign and
// friends): a lock whose holder leads and a fenced value written with the
// holder's token. A leader may lose its lock at any moment (the model has no
// clock), so a read may always find no leader; what it checks is that
// terms strictly increase, that a read reports the leader of the current
// term with the value last written in it, that a term once gone never comes
// back, and that a Proclaim is refused exactly when a newer term has
// written. At most one leader per term follows from the first.
var Elections = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		return partitionBy(h, func(in any) string { return in.(ElectionInput).Name })
	},
	Init: func() []any { return []any{electionState{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(electionState), in.(ElectionInput), out.(ElectionOutput)
		gone := s
		gone.leads = false
		switch i.Op {
		case Campaign:
			switch {
			case o.Unknown: // not elected, or elected and written with a term we cannot see
				return []any{s, electionState{max: s.max, leads: true, vague: true, vagueV: i.Value},
					electionState{max: s.max, vague: true, vagueV: i.Value}}
			case !o.OK:
				return []any{s}
			case o.Token <= s.max:
				return nil
			}
			return []any{electionState{max: o.Token, term: o.Token, value: i.Value, leads: true}}
		case Proclaim:
			// A Put with the term's token: accepted iff no newer term wrote.
			accepted := !s.vague && i.Token >= s.term
			written := electionState{max: max(s.max, i.Token), term: i.Token, value: i.Value, leads: s.leads && i.Token == s.term && !s.vague}
			switch {
			case o.Unknown && accepted:
				return []any{s, written}
			case o.Unknown:
				return []any{s}
			case o.OK && accepted:
				return []any{written}
			case o.Deposed && !accepted:
				return []any{s}
			case !o.OK && !o.Deposed: // refused locally: the leadership had ended
				return []any{s}
			}
			return nil
		case Resign:
			if i.Token == s.term && !s.vague {
				if o.OK {
					return []any{gone}
				}
				return []any{s, gone}
			}
			return []any{s}
		}
		// ReadLeader.
		switch {
		case o.Unknown:
			return []any{s}
		case !o.OK:
			return []any{gone}
		case s.vague && s.leads && o.Value == s.vagueV && o.Token > s.max:
			return []any{electionState{max: o.Token, term: o.Token, value: o.Value, leads: true}}
		case !s.vague && s.leads && o.Token == s.term && o.Value == s.value:
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(ElectionInput), out.(ElectionOutput)
		res := "refused"
		switch {
		case o.Unknown:
			res = "unknown"
		case o.Deposed:
			res = "deposed"
		case i.Op == ReadLeader && o.OK:
			res = fmt.Sprintf("%q, term %d", o.Value, o.Token)
		case i.Op == ReadLeader:
			res = "no leader"
		case i.Op == Campaign && o.OK:
			res = fmt.Sprintf("term %d", o.Token)
		case o.OK:
			res = "ok"
		}
		switch i.Op {
		case Campaign:
			return fmt.Sprintf("campaign(%s, %q) → %s", i.Name, i.Value, res)
		case Proclaim:
			return fmt.Sprintf("proclaim(%s, term %d, %q) → %s", i.Name, i.Token, i.Value, res)
		case Resign:
			return fmt.Sprintf("resign(%s, term %d) → %s", i.Name, i.Token, res)
		}
		return fmt.Sprintf("leader(%s) → %s", i.Name, res)
	},
	DescribeState: func(st any) string {
		s := st.(electionState)
		who := fmt.Sprintf("term %d, %q", s.term, s.value)
		if s.vague {
			who = fmt.Sprintf("term > %d, %q", s.max, s.vagueV)
		}
		if !s.leads {
			return "no leader (last: " + who + ")"
		}
		return "led: " + who
	},
}
