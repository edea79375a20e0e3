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
	Caught string // the Violation.Check expected
}

// Bugs are the planted bugs by name.
var Bugs = map[string]Bug{
	// A waiter paused past its TTL ends its lease while queued; the bug
	// still hands it the lock.
	"regrant": {Tag: "fence_bug_regrant", Faults: []string{FaultPauseWorker}, Caught: "grant only to a live lease"},
	// Restarted nodes restore a snapshot and count tokens from too low.
	"token": {Tag: "fence_bug_token", Faults: []string{FaultKillLeader, FaultKillFollower}, Caught: "tokens only grow"},
	// A paused or cut-off leader keeps telling its clients "renewed".
	"deposed": {Tag: "fence_bug_deposed", Faults: []string{FaultPauseLeader, FaultPartition}, Caught: "validity windows never overlap"},
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
