package chaos

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/fencehq/fence/internal/audit"
)

// nodeAudit is one server's audit trail.
type nodeAudit struct {
	node    string
	records []audit.Record
}

func loadAudits(c *cluster) ([]nodeAudit, error) {
	var out []nodeAudit
	for _, n := range c.nodes {
		a := nodeAudit{node: n.id}
		if err := readLines(filepath.Join(n.dir, "audit.jsonl"), func(line []byte) error {
			var rec audit.Record
			if err := json.Unmarshal(line, &rec); err != nil {
				return err
			}
			a.records = append(a.records, rec)
			return nil
		}); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// serverGrant is a grant as the servers committed it.
type serverGrant struct {
	index uint64
	lock  string
	lease uint64
	token uint64
}

// auditCheck merges the nodes' trails by raft index and checks them from
// the servers' point of view: every node that applied an index recorded the
// same events; in index order, a lock is granted only while free, only to a
// live lease, with a token above every earlier one; only the holder
// releases; an ended lease holds nothing. It returns the grants by token.
func auditCheck(audits []nodeAudit) (grants map[uint64]serverGrant, expiries int, vs []Violation) {
	byIndex := map[uint64][]audit.Event{}
	from := map[uint64]string{}
	for _, a := range audits {
		for _, rec := range a.records {
			if rec.Restored || rec.Denied != nil {
				continue
			}
			prev, seen := byIndex[rec.Index]
			if !seen {
				byIndex[rec.Index], from[rec.Index] = rec.Events, a.node
				continue
			}
			if !slices.EqualFunc(prev, rec.Events, audit.Event.SameChange) {
				vs = append(vs, Violation{Check: "replicas agree", Detail: fmt.Sprintf(
					"index %d: %s applied %v but %s applied %v", rec.Index, from[rec.Index], prev, a.node, rec.Events)})
			}
		}
	}
	indexes := make([]uint64, 0, len(byIndex))
	for i := range byIndex {
		indexes = append(indexes, i)
	}
	slices.Sort(indexes)

	// A lock's grants held, by token: a mutex has at most one; a
	// semaphore's grants each hold their own slot; a read-write lock's
	// readers share slot 0, where a writer holds it alone.
	type grantState struct {
		lease  uint64
		slot   uint32
		shared bool
	}
	locks := map[string]map[uint64]grantState{}
	live := map[uint64]bool{}  // leases started and not ended
	ended := map[uint64]bool{} // leases seen ending
	holds := map[uint64]int{}  // locks held per lease
	grants = map[uint64]serverGrant{}
	var maxToken uint64
	bad := func(check string, i uint64, format string, args ...any) {
		vs = append(vs, Violation{Check: check, Detail: fmt.Sprintf("index %d: ", i) + fmt.Sprintf(format, args...)})
	}
	for _, i := range indexes {
		for _, e := range byIndex[i] {
			switch e.Kind {
			case "lease-started":
				live[e.Lease] = true
			case "lease-ended":
				if holds[e.Lease] > 0 {
					bad("ended lease holds nothing", i, "lease %d ended still holding %d lock(s)", e.Lease, holds[e.Lease])
				}
				delete(live, e.Lease)
				ended[e.Lease] = true
				if e.Cmd == "expire" {
					expiries++
				}
			case "granted":
				switch {
				case e.Lease == 0:
					bad("grant only to a live lease", i, "%s granted (token %d) to a lease that no longer exists", e.Lock, e.Token)
				case !live[e.Lease] && ended[e.Lease]:
					bad("grant only to a live lease", i, "%s granted (token %d) to lease %d, which had already ended", e.Lock, e.Token, e.Lease)
				}
				for tok, cur := range locks[e.Lock] {
					if cur.slot == e.Slot && !(cur.shared && e.Shared) {
						bad("one holder at a time", i, "%s granted to lease %d (token %d, slot %d, shared %v) while lease %d held it (token %d, shared %v)",
							e.Lock, e.Lease, e.Token, e.Slot, e.Shared, cur.lease, tok, cur.shared)
					}
				}
				if e.Token <= maxToken {
					bad("tokens only grow", i, "%s granted token %d after token %d had been granted", e.Lock, e.Token, maxToken)
				}
				maxToken = max(maxToken, e.Token)
				if locks[e.Lock] == nil {
					locks[e.Lock] = map[uint64]grantState{}
				}
				locks[e.Lock][e.Token] = grantState{e.Lease, e.Slot, e.Shared}
				holds[e.Lease]++
				grants[e.Token] = serverGrant{index: i, lock: e.Lock, lease: e.Lease, token: e.Token}
			case "released":
				cur, held := locks[e.Lock][e.Token]
				if !held || cur.lease != e.Lease {
					bad("only the holder releases", i, "%s released by lease %d token %d; it held %+v", e.Lock, e.Lease, e.Token, locks[e.Lock])
				}
				delete(locks[e.Lock], e.Token)
				holds[e.Lease]--
			}
		}
	}
	return grants, expiries, vs
}
