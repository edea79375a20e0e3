package histcheck

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// ModeInput is one call to a semaphore or a read-write lock.
type ModeInput struct {
	Name string
	Op   LockOp
	// Permits is the lock's permit count (1: a mutex or a read-write
	// lock); every call of a name in a history gives the same.
	Permits int
	Shared  bool   // Acquire: a reader's grant
	Token   uint64 // Release: the grant given back
}

// Grant is one grant as a call saw it.
type Grant struct {
	Token  uint64
	Slot   int
	Shared bool
}

// ModeOutput is what the call returned.
type ModeOutput struct {
	Unknown bool  // it failed in a way that may or may not have taken effect
	OK      bool  // Acquire: granted; Release: released (else refused)
	Grant   Grant // Acquire: the grant
	// Held (Status): every grant held, as the server listed them.
	Held []Grant
}

// modeState is the model's state: the grants held as far as the model
// knows, encoded ("token/slot/s|x,…" by token) so states compare with ==.
type modeState struct {
	held string
	max  uint64 // the highest token granted (a lower bound when unknown)
	// unknown lists the acquires of unknown outcome since the last read,
	// each by the highest token granted when it took effect (if it did):
	// each may hold one grant the model does not list, with a token above
	// its bound. Encoded ("bound,…" increasing) so states compare with ==.
	unknown string
}

func encodeBounds(bs []uint64) string {
	slices.Sort(bs)
	var b strings.Builder
	for _, v := range bs {
		fmt.Fprintf(&b, "%d,", v)
	}
	return b.String()
}

func decodeBounds(s string) []uint64 {
	var bs []uint64
	for _, f := range strings.Split(strings.TrimSuffix(s, ","), ",") {
		if f == "" {
			continue
		}
		v, _ := strconv.ParseUint(f, 10, 64)
		bs = append(bs, v)
	}
	return bs
}

// unknownFit reports whether tokens (of grants a read lists that no known
// acquire made) can each come from its own acquire of unknown outcome, one
// whose bound is below the token: the smallest tokens take the smallest
// bounds.
func unknownFit(tokens, bounds []uint64) bool {
	if len(tokens) > len(bounds) {
		return false
	}
	slices.Sort(tokens)
	for i, t := range tokens {
		if t <= bounds[i] { // bounds are increasing
			return false
		}
	}
	return true
}

func encodeGrants(gs []Grant) string {
	slices.SortFunc(gs, func(a, b Grant) int { return cmp.Compare(a.Token, b.Token) })
	var b strings.Builder
	for _, g := range gs {
		mode := "x"
		if g.Shared {
			mode = "s"
		}
		fmt.Fprintf(&b, "%d/%d/%s,", g.Token, g.Slot, mode)
	}
	return b.String()
}

func decodeGrants(s string) []Grant {
	var gs []Grant
	for _, f := range strings.Split(strings.TrimSuffix(s, ","), ",") {
		if f == "" {
			continue
		}
		p := strings.Split(f, "/")
		tok, _ := strconv.ParseUint(p[0], 10, 64)
		slot, _ := strconv.Atoi(p[1])
		gs = append(gs, Grant{Token: tok, Slot: slot, Shared: p[2] == "s"})
	}
	return gs
}

// fits reports whether gs could be held at once on a lock of permits: at
// most permits exclusive grants, each in its own slot below permits; shared
// grants only on a lock of one permit, never beside an exclusive one.
func fits(gs []Grant, permits int) bool {
	slots := map[int]bool{}
	shared := 0
	for _, g := range gs {
		if g.Shared {
			shared++
			if permits != 1 || g.Slot != 0 {
				return false
			}
			continue
		}
		if g.Slot < 0 || g.Slot >= permits || slots[g.Slot] {
			return false
		}
		slots[g.Slot] = true
	}
	return shared == 0 || len(slots) == 0
}

// Modes is the model of semaphores and read-write locks, one partition per
// lock. As in Locks, a lease may expire at any moment (the model has no
// clock): a grant that does not fit beside the grants held means those it
// conflicts with expired (a permit's slot is taken only by the next holder
// of that slot; a writer ends every grant; a reader ends a writer's).
// Time-based exclusion is checked from the jobs' own logs. What it checks:
// tokens strictly increase over all grants of a name, so a writer's token
// is above every earlier reader's; a permit's slot is below the count; a
// release succeeds only for a grant held; a read lists only grants held
// (or, after an unknown acquire, one that may be), and never more than
// fit at once (N permits, one per slot; readers or one writer).
var Modes = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		return partitionBy(h, func(in any) string { return in.(ModeInput).Name })
	},
	Init: func() []any { return []any{modeState{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(modeState), in.(ModeInput), out.(ModeOutput)
		held := decodeGrants(s.held)
		without := func(keep func(Grant) bool) modeState {
			return modeState{held: encodeGrants(slices.DeleteFunc(slices.Clone(held), func(g Grant) bool { return !keep(g) })),
				max: s.max, unknown: s.unknown}
		}
		switch {
		case o.Unknown && i.Op == Acquire:
			u := s
			u.unknown = encodeBounds(append(decodeBounds(s.unknown), s.max))
			return []any{s, u}
		case o.Unknown && i.Op == Release:
			return []any{s, without(func(g Grant) bool { return g.Token != i.Token })}
		case o.Unknown:
			return []any{s}
		case i.Op == Acquire && o.OK:
			g := o.Grant
			if g.Token <= s.max || g.Shared != i.Shared || !fits([]Grant{g}, i.Permits) {
				return nil
			}
			var next modeState
			switch {
			case i.Permits > 1: // the slot's last holder expired, if it still held it
				next = without(func(h Grant) bool { return h.Slot != g.Slot })
			case g.Shared: // a writer that still held it expired
				next = without(func(h Grant) bool { return h.Shared })
			default: // every holder expired, and any unknown grant with them
				next = modeState{}
			}
			next.held = encodeGrants(append(decodeGrants(next.held), g))
			next.max = g.Token
			return []any{next}
		case i.Op == Acquire:
			return []any{s}
		case i.Op == Release:
			holds := slices.ContainsFunc(held, func(g Grant) bool { return g.Token == i.Token })
			gone := without(func(g Grant) bool { return g.Token != i.Token })
			switch {
			case o.OK && holds:
				return []any{gone}
			case o.OK:
				return nil
			case holds: // refused: its lease had ended (or the client gave it up locally)
				return []any{s, gone}
			}
			return []any{s}
		}
		// Status: what it lists is held now; what it does not, has ended.
		if !fits(o.Held, i.Permits) {
			return nil
		}
		next := modeState{max: s.max}
		var fresh []uint64 // tokens of grants no known acquire made
		for _, g := range o.Held {
			if !slices.Contains(held, g) {
				fresh = append(fresh, g.Token)
			}
			next.max = max(next.max, g.Token)
		}
		if !unknownFit(fresh, decodeBounds(s.unknown)) {
			return nil
		}
		next.held = encodeGrants(slices.Clone(o.Held))
		return []any{next}
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(ModeInput), out.(ModeOutput)
		mode := ""
		if i.Shared {
			mode = ", shared"
		}
		res := "refused"
		switch {
		case o.Unknown:
			res = "unknown"
		case i.Op == Status:
			res = encodeGrants(slices.Clone(o.Held))
		case i.Op == Acquire && o.OK:
			res = fmt.Sprintf("token %d slot %d", o.Grant.Token, o.Grant.Slot)
		case o.OK:
			res = "ok"
		}
		switch i.Op {
		case Acquire:
			return fmt.Sprintf("acquire(%s/%d%s) → %s", i.Name, i.Permits, mode, res)
		case Release:
			return fmt.Sprintf("release(%s, token %d) → %s", i.Name, i.Token, res)
		}
		return fmt.Sprintf("status(%s) → [%s]", i.Name, res)
	},
	DescribeState: func(st any) string {
		s := st.(modeState)
		if s.unknown != "" {
			return fmt.Sprintf("held [%s] and maybe one more per bound [%s] (last token ≥ %d)", s.held, s.unknown, s.max)
		}
		return fmt.Sprintf("held [%s] (last token %d)", s.held, s.max)
	},
}
