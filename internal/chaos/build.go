package chaos

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
)

// Bug is a planted bug (see internal/planted): the build tag that plants it,
// the faults that provoke it, and the check that must catch it.
type Bug struct {
	Tag    string
	Faults []string
	Locks  int // 0: the default
	// Transports are the workers' transports (nil: the default, both).
	Transports []string
	Caught     []string // the Violation.Check expected (any of them)
}

// Bugs are the planted bugs by name.
var Bugs = map[string]Bug{
	// A waiter paused past its TTL ends its lease while queued (one lock:
	// long queues); the bug still hands it the lock.
	"regrant": {Tag: "fence_bug_regrant", Faults: []string{FaultPauseWorker}, Locks: 1, Caught: []string{"grant only to a live lease"}},
	// Restarted nodes restore a snapshot and count tokens from too low: they
	// disagree with the others on what they replay, and grant old tokens
	// again once they lead.
	"token": {Tag: "fence_bug_token", Faults: []string{FaultKillLeader, FaultKillFollower},
		Caught: []string{"tokens only grow", "replicas agree", "no token granted twice"}},
	// A paused or cut-off leader keeps telling its clients "renewed".
	// deposed: the renewals a deposed node answers from memory keep a holder
	// believing in an ended lease (windows overlap), and the held tokens they
	// report come from a stale state, which can leave the lock history with
	// no legal order. It shows when a holder goes on renewing with the
	// deposed node: a leader cut off from its peers that its clients still
	// reach (a paused one is given up on, TTL/3 without an answer, before
	// it resumes deposed), and a client on the unary path, whose KeepAlive
	// stream stays with the node while it answers (on a Session stream the
	// renewals follow the session's next call, which the deposed node
	// refuses, to another member). Caught in 1 of 5 runs with both faults
	// and both transports, 2 of 5 on the unary path, 4 of 5 as here.
	"deposed": {Tag: "fence_bug_deposed", Faults: []string{FaultIsolateLeader}, Transports: []string{TransportUnary},
		Caught: []string{"validity windows never overlap", "lock service is linearizable"}},
	"replay": {Tag: "fence_bug_replay", Faults: []string{FaultReplay, FaultPauseWorker},
		Caught: []string{"a late duplicate is never acted on", "validity windows never overlap"}},
}

// CaughtBy returns the first violated check that catches the bug, or "".
func (b Bug) CaughtBy(r *Report) string {
	for _, c := range r.Checks() {
		if contains(b.Caught, c) {
			return c
		}
	}
	return ""
}

// BugNames lists Bugs' keys, sorted.
func BugNames() []string {
	var out []string
	for k := range Bugs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// BuildFence builds cmd/fence into dir with the given build tags and
// returns the binary's path.
func BuildFence(dir string, tags ...string) (string, error) {
	bin := filepath.Join(dir, "fence")
	args := []string{"build", "-o", bin}
	for _, t := range tags {
		args = append(args, "-tags", t)
	}
	out, err := exec.Command("go", append(args, "github.com/fencehq/fence/cmd/fence")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %v: %v\n%s", tags, err, out)
	}
	return bin, nil
}
