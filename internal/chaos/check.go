package chaos

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencehq/fence/internal/histcheck"
)

// Violation is one broken property, with the evidence.
type Violation struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
	// Ops is the smallest history found that shows it (for the models: the
	// shortest failing prefix of the failing partition).
	Ops []*Op `json:"ops,omitempty"`
	// HTML is porcupine's visualisation of Ops, if a model failed.
	HTML string `json:"html,omitempty"`
}

// porcupineTimeout bounds each partition's linearizability check; a check
// that runs out of time is reported as inconclusive, never as a pass.
const porcupineTimeout = 2 * time.Minute

// check runs every check over the recorded operations and the audit trails.
// ttls are the lease TTLs the servers granted, by lease number, as the
// proxy saw them.
func check(ops []*Op, audits []nodeAudit, ttls map[uint64]time.Duration, outDir string) *Report {
	r := &Report{Operations: len(ops), Writes: map[string]int{}}
	for _, o := range ops {
		row := o.Kind == "claim" || o.Kind == "write"
		switch {
		case o.Kind == "acquire" && o.Outcome == OK && o.Client != "final":
			r.Grants++
		case o.Outcome == Stale && row && o.Store == StorePostgres:
			r.StaleRefused.Postgres++
			if o.Tx && o.Kind == "write" {
				r.StaleRefused.PostgresTx++
			}
		case o.Outcome == Stale && row && o.Store == StoreMySQL:
			r.StaleRefused.MySQL++
			if o.Tx && o.Kind == "write" {
				r.StaleRefused.MySQLTx++
			}
		case o.Outcome == Serialization:
			r.StaleRefused.Serialization++
		case o.Outcome == Stale && o.Kind == "kvput":
			r.StaleRefused.KV++
		case o.Kind == "campaign" && o.Outcome == OK:
			r.Terms++
		case o.Kind == "macquire" && o.Outcome == OK && o.Shared:
			r.ModeGrants.Shared++
		case o.Kind == "macquire" && o.Outcome == OK && o.Permits > 1:
			r.ModeGrants.Permits++
		case o.Kind == "macquire" && o.Outcome == OK:
			r.ModeGrants.Exclusive++
		case o.Kind == "proclaim" && o.Outcome == Stale:
			r.Deposed++
		}
		if o.Kind == "write" && o.Outcome == OK {
			r.Writes[o.Store+map[bool]string{true: " in tx", false: ""}[o.Tx]]++
		}
		if o.Open() {
			r.Unknown++
		}
	}
	for _, o := range ops {
		if o.Outcome == BadSignature {
			r.add(Violation{Check: "every grant's signed token verifies for its lock", Detail: fmt.Sprintf("%s token %d: %s", o.Lock, o.Token, o.Err), Ops: []*Op{o}})
		}
		if o.Client == "final" && o.Kind == "acquire" && o.Outcome != OK {
			r.add(Violation{Check: "every lock can be taken once the faults stop", Detail: fmt.Sprintf("%s: %s", o.Lock, o.Err), Ops: []*Op{o}})
		}
	}
	grants, expiries, vs := auditCheck(audits)
	r.Expiries = expiries
	r.add(vs...)
	r.add(grantsCommitted(ops, grants)...)
	r.add(tokenOrder(ops)...)
	r.add(windows(ops)...)
	var dv []Violation
	var unseen int
	r.LeaseTTLs, unseen, dv = deadlines(ops, ttls)
	r.add(dv...)
	if unseen > 0 {
		r.Inconclusive = append(r.Inconclusive, fmt.Sprintf(
			"%d leases that workers locked with never passed the proxy (a call went around it): their deadlines went unchecked and their calls unreplayed", unseen))
	}
	lost, lv := lostUpdates(ops)
	r.LostUpdates = lost
	r.add(lv...)
	r.add(r.linearizable("lock service", histcheck.Locks.ToModel(), lockHistory(ops), outDir)...)
	for _, st := range []string{StorePostgres, StoreMySQL} {
		r.add(r.linearizable(st+" rows", histcheck.FencedKV, registerHistory(ops, st, "claim", "read", "write"), outDir)...)
	}
	r.add(r.linearizable("fenced key-value", histcheck.FencedKV, registerHistory(ops, "", "", "kvget", "kvput"), outDir)...)
	r.add(r.linearizable("elections", histcheck.Elections.ToModel(), electionHistory(ops), outDir)...)
	r.add(r.linearizable("semaphores and read-write locks", histcheck.Modes.ToModel(), modeHistory(ops), outDir)...)
	r.add(modeWindows(ops)...)
	if len(r.Violations) == 0 {
		r.Violations = []Violation{}
	}
	return r
}

// grantsCommitted: every grant a worker was told of is in the servers'
// committed history, for the same lock.
func grantsCommitted(ops []*Op, grants map[uint64]serverGrant) []Violation {
	var vs []Violation
	for _, o := range ops {
		if o.Kind != "acquire" || o.Outcome != OK {
			continue
		}
		g, ok := grants[o.Token]
		switch {
		case !ok:
			vs = append(vs, Violation{Check: "no acknowledged grant lost", Detail: fmt.Sprintf("token %d of %s is in no server's audit trail", o.Token, o.Lock), Ops: []*Op{o}})
		case g.lock != o.Lock:
			vs = append(vs, Violation{Check: "no acknowledged grant lost", Detail: fmt.Sprintf("token %d was acknowledged for %s but committed for %s", o.Token, o.Lock, g.lock), Ops: []*Op{o}})
		}
	}
	return vs
}

// tokenOrder: across all locks, a grant that returned before another was
// called has the lower token (one global counter, in real-time order).
func tokenOrder(ops []*Op) []Violation {
	var acq []*Op
	for _, o := range ops {
		if o.Kind == "acquire" && o.Outcome == OK {
			acq = append(acq, o)
		}
	}
	byReturn := append([]*Op(nil), acq...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	sort.Slice(acq, func(i, j int) bool { return acq[i].Call < acq[j].Call })
	var vs []Violation
	var best *Op // the highest token among grants returned before the current call
	k := 0
	seen := map[uint64]*Op{}
	for _, o := range acq {
		for ; k < len(byReturn) && byReturn[k].Return < o.Call; k++ {
			if best == nil || byReturn[k].Token > best.Token {
				best = byReturn[k]
			}
		}
		if best != nil && o.Token <= best.Token {
			vs = append(vs, Violation{Check: "tokens only grow", Detail: fmt.Sprintf("%s got token %d after %s had got token %d", o.Lock, o.Token, best.Lock, best.Token), Ops: []*Op{best, o}})
		}
		if p := seen[o.Token]; p != nil {
			vs = append(vs, Violation{Check: "no token granted twice", Detail: fmt.Sprintf("token %d granted for %s and for %s", o.Token, p.Lock, o.Lock), Ops: []*Op{p, o}})
		}
		seen[o.Token] = o
	}
	return vs
}

// window is the time a worker believed it held a lock: from the grant's
// return until the lease deadline it last believed, or until it called
// release, whichever came first.
type window struct {
	lock       string
	token      uint64
	start, end int64
	ops        []*Op
}

// windows: no two workers believed they held the same lock at the same
// time. The client's deadline counts from when it sent its last successful
// renewal, minus a margin, so this holds whenever every leader kept its
// promises — a deposed leader that acknowledged a renewal breaks it.
func windows(ops []*Op) []Violation {
	byGrant := map[string]*window{}
	var ws []*window
	for _, o := range ops {
		if o.Kind == "acquire" && o.Outcome == OK && o.Client != "final" {
			w := &window{lock: o.Lock, token: o.Token, start: o.Return, end: o.ValidUntil, ops: []*Op{o}}
			byGrant[o.Lock+"/"+strconv.FormatUint(o.Token, 10)] = w
			ws = append(ws, w)
		}
	}
	for _, o := range ops {
		w := byGrant[o.Lock+"/"+strconv.FormatUint(o.Token, 10)]
		if w == nil || o.Kind == "acquire" {
			continue
		}
		switch {
		case o.Kind == "release":
			w.end = min(w.end, o.Call)
			w.ops = append(w.ops, o)
		case o.ValidUntil > w.end:
			w.end = o.ValidUntil
			w.ops = append(w.ops, o)
		}
	}
	byLock := map[string][]*window{}
	for _, w := range ws {
		byLock[w.lock] = append(byLock[w.lock], w)
	}
	var vs []Violation
	for _, lw := range byLock {
		sort.Slice(lw, func(i, j int) bool { return lw[i].start < lw[j].start })
		var open *window // the window reaching furthest so far
		for _, w := range lw {
			if open != nil && w.start < open.end && w.end > w.start {
				vs = append(vs, Violation{Check: "validity windows never overlap",
					Detail: fmt.Sprintf("%s: token %d believed valid until %.3fs while token %d was granted at %.3fs (overlap %v)",
						w.lock, open.token, sec(open.end), w.token, sec(w.start), time.Duration(open.end-w.start)),
					Ops: append(append([]*Op(nil), open.ops...), w.ops...)})
			}
			if open == nil || w.end > open.end {
				open = w
			}
		}
	}
	return vs
}

// minMargin is the client's documented safety margin for a lease of ttl
// (client.WithSafetyMargin): TTL/10, at least TTL×1000 ppm + 10 ms. It is
// written out here, not taken from the client, so the check stays
// independent of the code it checks.
func minMargin(ttl time.Duration) time.Duration {
	return max(ttl/10, ttl/1_000_000*1000+10*time.Millisecond)
}

// deadlineSlack absorbs converting the client's deadline to Mono's clock.
const deadlineSlack = time.Millisecond

// deadlines: each lease has the TTL its lock asked for (the servers' answer,
// seen by the proxy), and every deadline a worker believed leaves that
// lease's own margin: it is at most the moment the worker read it plus the
// lease's TTL minus TTL/10 (the client counts from a renewal it sent before
// then). A margin taken from another TTL — the client's, or another
// lease's — breaks this for a lease whose TTL differs from the session's.
// It returns how many leases it knew the TTL of, and how many it did not.
func deadlines(ops []*Op, ttls map[uint64]time.Duration) (known, unknown int, vs []Violation) {
	grant := map[string]*Op{}
	for _, o := range ops {
		if o.Kind == "acquire" && o.Outcome == OK && o.Client != "final" {
			grant[o.Lock+"/"+strconv.FormatUint(o.Token, 10)] = o
		}
	}
	seen := map[uint64]bool{}
	for _, o := range ops {
		if o.ValidUntil == 0 || o.Seen == 0 || o.Outcome == Unknown && o.Kind == "acquire" {
			continue
		}
		g := grant[o.Lock+"/"+strconv.FormatUint(o.Token, 10)]
		if g == nil || g.Lease == 0 {
			continue
		}
		ttl, ok := ttls[g.Lease]
		if _, counted := seen[g.Lease]; !counted {
			seen[g.Lease] = ok
			if ok {
				known++
			} else {
				unknown++
			}
		}
		if !ok {
			continue
		}
		if o == g && g.TTL != 0 && ttl != g.TTL {
			vs = append(vs, Violation{Check: "a lease has the TTL its lock asked for", Detail: fmt.Sprintf(
				"%s token %d: asked for %v, lease %d has %v", o.Lock, o.Token, g.TTL, g.Lease, ttl), Ops: []*Op{g}})
		}
		if limit := o.Seen + int64(ttl-minMargin(ttl)+deadlineSlack); o.ValidUntil > limit {
			vs = append(vs, Violation{Check: "a deadline leaves its own lease's margin", Detail: fmt.Sprintf(
				"%s token %d (lease %d, TTL %v): believed valid %v after it was read, more than TTL − %v",
				o.Lock, o.Token, g.Lease, ttl, time.Duration(o.ValidUntil-o.Seen), minMargin(ttl)), Ops: []*Op{g, o}})
		}
	}
	return known, unknown, vs
}

func sec(ns int64) float64 { return float64(ns) / 1e9 }

// lostUpdates: each acknowledged write of a row stores the value it read
// plus one; two acknowledged writes of the same value to the same row mean
// one increment was overwritten.
func lostUpdates(ops []*Op) (int, []Violation) {
	first := map[string]*Op{}
	lost := 0
	var vs []Violation
	for _, o := range ops {
		if o.Kind != "write" || o.Outcome != OK {
			continue
		}
		k := o.Store + "/" + o.Lock + "=" + o.Value
		if p := first[k]; p != nil {
			lost++
			if len(vs) < 10 {
				vs = append(vs, Violation{Check: "no acknowledged write lost", Detail: fmt.Sprintf("%s row %s: value %s written by token %d and again by token %d: one increment was lost", o.Store, o.Lock, o.Value, p.Token, o.Token), Ops: []*Op{p, o}})
			}
			continue
		}
		first[k] = o
	}
	return lost, vs
}

// history is a porcupine history with the recorded operation behind each entry.
type history struct {
	ops     []porcupine.Operation
	orig    []*Op
	clients map[string]int
}

func (h *history) add(o *Op, in, out any) {
	if h.clients == nil {
		h.clients = map[string]int{}
	}
	id, ok := h.clients[o.Client]
	if !ok {
		id = len(h.clients)
		h.clients[o.Client] = id
	}
	ret := o.Return
	if o.Open() {
		ret = math.MaxInt64
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: id, Call: o.Call, Return: ret, Input: in, Output: out})
	h.orig = append(h.orig, o)
}

func lockHistory(ops []*Op) *history {
	h := &history{}
	for _, o := range ops {
		unknown := o.Open()
		switch o.Kind {
		case "acquire":
			h.add(o, histcheck.LockInput{Name: o.Lock, Op: histcheck.Acquire}, histcheck.LockOutput{Unknown: unknown, OK: o.Outcome == OK, Token: o.Token})
		case "release":
			h.add(o, histcheck.LockInput{Name: o.Lock, Op: histcheck.Release, Token: o.Token}, histcheck.LockOutput{Unknown: unknown, OK: o.Outcome == OK})
		case "status":
			h.add(o, histcheck.LockInput{Name: o.Lock, Op: histcheck.Status}, histcheck.LockOutput{Unknown: unknown, Token: o.Token})
		}
	}
	return h
}

// modeHistory maps the semaphore and read-write lock operations onto the
// modes model.
func modeHistory(ops []*Op) *history {
	h := &history{}
	for _, o := range ops {
		in := histcheck.ModeInput{Name: o.Lock, Permits: o.Permits, Shared: o.Shared}
		out := histcheck.ModeOutput{Unknown: o.Open(), OK: o.Outcome == OK}
		switch o.Kind {
		case "macquire":
			in.Op, out.Grant = histcheck.Acquire, histcheck.Grant{Token: o.Token, Slot: o.Slot, Shared: o.Shared}
		case "mrelease":
			in.Op, in.Token = histcheck.Release, o.Token
		default:
			continue
		}
		h.add(o, in, out)
	}
	return h
}

// modeWindows: no two workers believed they held one permit of the
// semaphore (one slot) at the same time, and nobody believed they read the
// read-write lock while a writer believed it held it (windows as in
// windows: from the grant's return to the deadline the worker last saw, or
// to its release call).
func modeWindows(ops []*Op) []Violation {
	type modeWindow struct {
		window
		slot   int
		shared bool
	}
	byGrant := map[string]*modeWindow{}
	var ws []*modeWindow
	key := func(o *Op) string { return o.Lock + "/" + strconv.FormatUint(o.Token, 10) }
	for _, o := range ops {
		if o.Kind == "macquire" && o.Outcome == OK {
			w := &modeWindow{window: window{lock: o.Lock, token: o.Token, start: o.Return, end: o.ValidUntil, ops: []*Op{o}}, slot: o.Slot, shared: o.Shared}
			byGrant[key(o)] = w
			ws = append(ws, w)
		}
	}
	for _, o := range ops {
		if w := byGrant[key(o)]; w != nil && o.Kind == "mrelease" {
			w.end = min(w.end, o.Call)
			w.ops = append(w.ops, o)
		}
	}
	var vs []Violation
	for i, a := range ws {
		for _, b := range ws[i+1:] {
			if a.lock != b.lock || a.start >= b.end || b.start >= a.end || a.end <= a.start || b.end <= b.start {
				continue
			}
			if (a.shared && b.shared) || (a.lock == SemaphoreName && a.slot != b.slot) {
				continue // readers beside readers, permits in different slots
			}
			vs = append(vs, Violation{Check: "validity windows of one permit, or of a writer, never overlap",
				Detail: fmt.Sprintf("%s: token %d (slot %d, shared %v) believed valid %.3fs–%.3fs, token %d (slot %d, shared %v) %.3fs–%.3fs",
					a.lock, a.token, a.slot, a.shared, sec(a.start), sec(a.end), b.token, b.slot, b.shared, sec(b.start), sec(b.end)),
				Ops: append(append([]*Op(nil), a.ops...), b.ops...)})
		}
	}
	return vs
}

// electionHistory maps the election operations (the workers' and the
// replayed proclaims) onto the election model.
func electionHistory(ops []*Op) *history {
	h := &history{}
	ops2 := map[string]histcheck.ElectionOp{"campaign": histcheck.Campaign, "proclaim": histcheck.Proclaim,
		"resign": histcheck.Resign, "leader": histcheck.ReadLeader}
	for _, o := range ops {
		op, ok := ops2[o.Kind]
		if !ok {
			continue
		}
		in := histcheck.ElectionInput{Name: o.Lock, Op: op, Value: o.Value, Token: o.Token}
		out := histcheck.ElectionOutput{Unknown: o.Open(), OK: o.Outcome == OK, Deposed: o.Outcome == Stale}
		switch op {
		case histcheck.Campaign:
			in.Token, out.Token = 0, o.Token
		case histcheck.ReadLeader:
			in.Value, in.Token, out.Value, out.Token = "", 0, o.Value, o.Token
		}
		h.add(o, in, out)
	}
	return h
}

// registerHistory maps one resource's operations onto the fenced register
// model: the rows of store (claim, read, write), or with store "" the
// built-in key-value store. Rows start as value 0 with fence 0 (an initial
// write). A write whose transaction was rolled back (fail, serialization)
// had no effect and is left out.
func registerHistory(ops []*Op, store, claim, read, write string) *history {
	h := &history{}
	initial := map[string]bool{}
	for _, o := range ops {
		if o.Kind != claim && o.Kind != read && o.Kind != write || o.Store != store {
			continue
		}
		if (o.Kind == claim || o.Kind == write) && (o.Outcome == Fail || o.Outcome == Serialization) {
			continue
		}
		if claim != "" && !initial[o.Lock] {
			initial[o.Lock] = true
			h.add(&Op{Client: "init", Kind: write, Lock: o.Lock, Store: store, Value: "0", Call: -2, Return: -1, Outcome: OK},
				histcheck.KVInput{Key: o.Lock, Put: true, Value: "0"}, histcheck.KVOutput{})
		}
		unknown := o.Open()
		switch o.Kind {
		case claim:
			h.add(o, histcheck.KVInput{Key: o.Lock, Put: true, Claim: true, Token: o.Token}, histcheck.KVOutput{Unknown: unknown, Stale: o.Outcome == Stale, Token: o.Highest})
		case write:
			h.add(o, histcheck.KVInput{Key: o.Lock, Put: true, Value: o.Value, Token: o.Token}, histcheck.KVOutput{Unknown: unknown, Stale: o.Outcome == Stale, Token: o.Highest})
		case read:
			h.add(o, histcheck.KVInput{Key: o.Lock}, histcheck.KVOutput{Unknown: unknown, Found: o.Outcome == OK, Value: o.Value, Token: o.Token})
		}
	}
	return h
}

// linearizable checks h against model, partition by partition. For a
// failing partition it finds the shortest failing prefix (by call time) and
// writes porcupine's visualisation of it.
func (r *Report) linearizable(name string, model porcupine.Model, h *history, outDir string) []Violation {
	parts := [][]int{}
	{
		idx := map[string]int{}
		for i, o := range h.orig {
			k, ok := idx[o.Lock]
			if !ok {
				k = len(parts)
				idx[o.Lock] = k
				parts = append(parts, nil)
			}
			parts[k] = append(parts[k], i)
		}
	}
	var vs []Violation
	var deadline time.Time
	for _, part := range parts {
		ops := make([]porcupine.Operation, len(part))
		orig := make([]*Op, len(part))
		for j, i := range part {
			ops[j], orig[j] = h.ops[i], h.orig[i]
		}
		res, _ := porcupine.CheckOperationsVerbose(model, ops, porcupineTimeout)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			r.Inconclusive = append(r.Inconclusive, fmt.Sprintf("%s %s: %d operations, no answer within %v", name, orig[0].Lock, len(ops), porcupineTimeout))
			continue
		}
		// Shortening the histories and drawing them share one more
		// porcupineTimeout, over all partitions: a run's checks end in
		// bounded time.
		if deadline.IsZero() {
			deadline = time.Now().Add(porcupineTimeout)
		}
		n := shortestFailingPrefix(model, ops, deadline)
		v := Violation{Check: name + " is linearizable", Detail: fmt.Sprintf("%s: the first %d of %d operations already admit no legal order", orig[0].Lock, n, len(ops)), Ops: orig[:n]}
		if left := time.Until(deadline); left > 0 {
			if res, info := porcupine.CheckOperationsVerbose(model, ops[:n], left); res == porcupine.Illegal {
				path := filepath.Join(outDir, fmt.Sprintf("violation-%s-%s.html", slug(name), orig[0].Lock))
				if f, err := os.Create(path); err == nil {
					if porcupine.Visualize(model, info, f) == nil {
						v.HTML = path
					}
					f.Close()
				}
			}
		}
		vs = append(vs, v)
	}
	return vs
}

// shortestFailingPrefix binary-searches the shortest prefix (ops are sorted
// by call time) that is not linearizable; the whole history is. At the
// deadline it returns the shortest failing prefix found so far (hi is
// always one).
func shortestFailingPrefix(model porcupine.Model, ops []porcupine.Operation, deadline time.Time) int {
	lo, hi := 1, len(ops)
	for lo < hi {
		left := time.Until(deadline)
		if left <= 0 { // (a zero timeout would mean none to porcupine)
			break
		}
		mid := (lo + hi) / 2
		if porcupine.CheckOperationsTimeout(model, ops[:mid], left) == porcupine.Illegal {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

func slug(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}
