package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencehq/fence/internal/fsm"
)

// Seed refuses a data dir that holds anything and a state that does not
// decode, and leaves no data dir behind when it refuses one it would have
// made; it seeds a missing dir with FORMAT and a raft log.
func TestSeedRefusals(t *testing.T) {
	state := fsm.New().Marshal(nil)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Seed(full, "n1", "127.0.0.1:7302", state, discard); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("seed into a dir that holds a file: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "d")
	if _, err := Seed(missing, "n1", "127.0.0.1:7302", []byte("not a state"), discard); err == nil {
		t.Fatal("seeded with a state that does not decode")
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("a refused seed made the data dir")
	}
	id, err := Seed(missing, "n1", "127.0.0.1:7302", state, discard)
	if err != nil || id == 0 {
		t.Fatalf("seed: %d %v", id, err)
	}
	if !HasLog(missing) {
		t.Fatal("no raft log after a seed")
	}
	if _, err := Seed(missing, "n1", "127.0.0.1:7302", state, discard); err == nil {
		t.Fatal("seeded the same dir twice")
	}
}
