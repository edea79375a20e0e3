package cli

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// fence hot lists the hottest locks, as a table or JSON; a limit over the
// server's is a usage error from the server, and -n counts.
func TestHot(t *testing.T) {
	addr := startServer(t)
	for _, name := range []string{"jobs/a", "jobs/a", "db/b"} {
		if code, _, errOut := fence(t, addr, "run", name, "--", "true"); code != 0 {
			t.Fatalf("run %s: %d %s", name, code, errOut)
		}
	}
	code, out, errOut := fence(t, addr, "hot", "--json")
	var got hotJSON
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("hot --json: %d %s %s", code, out, errOut)
	}
	// Counts decay with the log's clock (exp(-t/300s)): jobs/a's first grant
	// counts a little less than 1 by the time db/b is granted.
	if len(got.Locks) != 2 || got.Locks[0].Name != "jobs/a" || math.Abs(got.Locks[0].Grants-2) > 0.05 || got.Locks[1].Name != "db/b" || got.WindowSeconds != 300 {
		t.Errorf("hot --json: %s", out)
	}
	code, out, _ = fence(t, addr, "hot", "-n", "1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "jobs/a") || !strings.Contains(lines[0], "LOCK") {
		t.Errorf("hot -n 1: %d\n%s", code, out)
	}
	if code, _, errOut := fence(t, addr, "hot", "-n", "5000"); code == 0 || !strings.Contains(errOut, "limit 5000 is above 1000") {
		t.Errorf("hot -n 5000: %d %s", code, errOut)
	}
}
