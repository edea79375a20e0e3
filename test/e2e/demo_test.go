package e2e

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/fencehq/fence/internal/dbtest"
)

// TestDemo runs `fence demo` (real worker processes, a real SIGSTOP) against
// the built-in store and against Postgres: without tokens the paused holder's
// stale write wins; with tokens it is refused and B's data survives.
func TestDemo(t *testing.T) {
	for _, storage := range []string{"kv", "postgres"} {
		t.Run(storage, func(t *testing.T) {
			args := []string{"demo"}
			if storage == "postgres" {
				pg := dbtest.Postgres()
				dbtest.Open(t, pg) // starts Postgres, or skips (fails under FENCE_REQUIRE_DB=1)
				args = append(args, "--dsn", pg.DSN)
			}
			out, err := exec.Command(fenceBinary(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("fence demo: %v\n%s", err, out)
			}
			run1, run2, ok := strings.Cut(string(out), "Run 2:")
			if !ok {
				t.Fatalf("no second run:\n%s", out)
			}
			if !strings.Contains(run1, "total = 42000, written by A. WRONG") {
				t.Errorf("run 1 did not lose B's update:\n%s", run1)
			}
			if !regexp.MustCompile(`write REFUSED: token (\d+) < (\d+)`).MatchString(run2) ||
				!strings.Contains(run2, "total = 43500, written by B. correct") {
				t.Errorf("run 2 did not refuse A's stale write:\n%s", run2)
			}
		})
	}
}
