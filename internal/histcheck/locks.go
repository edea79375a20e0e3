package histcheck

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// LockOp is what a call to the lock service did.
type LockOp uint8

// Lock operations.
const (
	Acquire LockOp = iota + 1
	Release
	Status
)

// LockInput is one call to the lock service.
type LockInput struct {
	Name  string
	Op    LockOp
	Token uint64 // Release: the grant given back
}

// LockOutput is what the call returned.
type LockOutput struct {
	Unknown bool   // it failed in a way that may or may not have taken effect
	OK      bool   // Acquire: granted; Release: released (else refused)
	Token   uint64 // Acquire: the grant's token; Status: the holder's token, 0 if free
}

type lockState struct {
	holder  uint64 // the holder's token, 0 when free (as far as the model knows)
	unknown bool   // an acquire with unknown outcome may hold it, with a token above max
	max     uint64 // the highest token granted (a lower bound when unknown)
}

// Locks is the model of the lock service, one partition per lock. A lease
// may expire at any moment (the model has no clock), so a grant while held
// is allowed as long as its token is above every earlier one; time-based
// exclusion is checked separately, from validity windows. What it does
// check: tokens strictly increase; a release succeeds only for the current
// holder; a read returns the current holder or free (after an expiry).
var Locks = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		return partitionBy(h, func(in any) string { return in.(LockInput).Name })
	},
	Init: func() []any { return []any{lockState{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(lockState), in.(LockInput), out.(LockOutput)
		free := lockState{max: s.max}
		switch {
		case i.Op == Acquire && o.Unknown:
			return []any{s, lockState{unknown: true, max: s.max}}
		case i.Op == Acquire && o.OK:
			if o.Token <= s.max {
				return nil
			}
			return []any{lockState{holder: o.Token, max: o.Token}}
		case i.Op == Acquire:
			return []any{s}
		case i.Op == Release && o.Unknown:
			if s.holder == i.Token && !s.unknown {
				return []any{s, free}
			}
			return []any{s}
		case i.Op == Release && o.OK:
			if s.holder != i.Token || s.unknown {
				return nil
			}
			return []any{free}
		case i.Op == Release:
			// Refused: the lease had ended on the server, or the client
			// already gave it up locally (its deadline comes first) and never
			// asked. Either way the release did nothing.
			if s.holder == i.Token && !s.unknown {
				return []any{s, free}
			}
			return []any{s}
		case o.Unknown:
			return []any{s}
		case o.Token == 0:
			return []any{free}
		case o.Token == s.holder && !s.unknown:
			return []any{s}
		case s.unknown && o.Token > s.max:
			return []any{lockState{holder: o.Token, max: o.Token}}
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(LockInput), out.(LockOutput)
		res := "refused"
		switch {
		case o.Unknown:
			res = "unknown"
		case i.Op == Status && o.Token == 0:
			res = "free"
		case i.Op == Status:
			res = fmt.Sprintf("held by token %d", o.Token)
		case i.Op == Acquire && o.OK:
			res = fmt.Sprintf("token %d", o.Token)
		case o.OK:
			res = "ok"
		}
		switch i.Op {
		case Acquire:
			return fmt.Sprintf("acquire(%s) → %s", i.Name, res)
		case Release:
			return fmt.Sprintf("release(%s, token %d) → %s", i.Name, i.Token, res)
		}
		return fmt.Sprintf("status(%s) → %s", i.Name, res)
	},
	DescribeState: func(st any) string {
		s := st.(lockState)
		switch {
		case s.unknown:
			return fmt.Sprintf("maybe held (token > %d)", s.max)
		case s.holder == 0:
			return fmt.Sprintf("free (last token %d)", s.max)
		}
		return fmt.Sprintf("held by token %d", s.holder)
	},
}

// partitionBy splits a history by a key of each input, keeping first-seen order.
func partitionBy(h []porcupine.Operation, key func(any) string) [][]porcupine.Operation {
	by := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range h {
		k := key(op.Input)
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], op)
	}
	var out [][]porcupine.Operation
	for _, k := range keys {
		out = append(out, by[k])
	}
	return out
}
