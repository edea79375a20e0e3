// Package histcheck holds porcupine models of fence's observable behaviour,
// so tests can check whole histories for linearizability instead of single
// outputs. An operation whose outcome is unknown (the call failed after it
// may have reached the server) is recorded with Return = math.MaxInt64 and
// an Unknown output: it may take effect at any point after its call.
package histcheck

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// KVInput is one call to the fenced key-value store.
type KVInput struct {
	Key string
	Put bool // else Get
	// Claim (with Put) raises the key's token without changing its value:
	// the claim step of a fenced read-modify-write.
	Claim bool
	Value string
	Token uint64
}

// KVOutput is what the call returned.
type KVOutput struct {
	Unknown bool   // the call failed; it may or may not have taken effect
	Stale   bool   // Put refused: a higher token had been accepted
	Found   bool   // Get: the key exists
	Value   string // Get
	Token   uint64 // Get: the highest token accepted; Stale: the highest reported
}

type kvState struct {
	value   string
	token   uint64
	written bool
}

// put applies an accepted Put or Claim.
func (s kvState) put(i KVInput) kvState {
	if i.Claim {
		return kvState{value: s.value, token: i.Token, written: s.written}
	}
	return kvState{value: i.Value, token: i.Token, written: true}
}

// FencedKV is the model of one fenced register per key: a Put is accepted
// iff its token is at least the highest accepted so far; a Get returns the
// last accepted value and its token.
var FencedKV = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		return partitionBy(h, func(in any) string { return in.(KVInput).Key })
	},
	Init: func() interface{} { return kvState{} },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		s, i, o := st.(kvState), in.(KVInput), out.(KVOutput)
		accepts := i.Token >= s.token
		switch {
		case i.Put && o.Unknown:
			if accepts {
				return true, s.put(i)
			}
			return true, s
		case i.Put && o.Stale:
			return !accepts && o.Token == s.token, s
		case i.Put:
			if !accepts {
				return false, s
			}
			return true, s.put(i)
		case o.Unknown:
			return true, s
		case !o.Found:
			return !s.written, s
		default:
			return s.written && o.Value == s.value && o.Token == s.token, s
		}
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(KVInput), out.(KVOutput)
		res := "ok"
		switch {
		case o.Unknown:
			res = "unknown"
		case o.Stale:
			res = fmt.Sprintf("stale (highest %d)", o.Token)
		case !i.Put && !o.Found:
			res = "not found"
		case !i.Put:
			res = fmt.Sprintf("%q@%d", o.Value, o.Token)
		}
		if i.Claim {
			return fmt.Sprintf("claim(%s, token %d) → %s", i.Key, i.Token, res)
		}
		if i.Put {
			return fmt.Sprintf("put(%s, %q, token %d) → %s", i.Key, i.Value, i.Token, res)
		}
		return fmt.Sprintf("get(%s) → %s", i.Key, res)
	},
	DescribeState: func(st interface{}) string {
		s := st.(kvState)
		if !s.written {
			return "(empty)"
		}
		return fmt.Sprintf("%q@%d", s.value, s.token)
	},
}
