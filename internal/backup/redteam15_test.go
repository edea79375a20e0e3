package backup

import (
	"errors"
	"testing"
)

// endless is a stream of bytes that never ends (like `fence snapshot status
// /dev/zero`, or a disk image given by mistake); it gives up after limit
// bytes so the test cannot eat the machine.
type endless struct{ read, limit int }

var errGaveUp = errors.New("the test's stream gave up")

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= e.limit {
		return 0, errGaveUp
	}
	n := min(len(p), e.limit-e.read)
	for i := range p[:n] {
		p[i] = 'x'
	}
	e.read += n
	return n, nil
}

// Red team (fixed): Read slurped its whole input (io.ReadAll) before it looks
// at the magic line, so `fence snapshot status` / `restore` on a file that
// is not a backup — a multi-GB disk image, /dev/zero, a FIFO — reads it all
// into memory (and OOMs) instead of refusing it at the 15th byte. The
// package doc promises a refusal ("not an intact fence backup") for
// anything else. Fix: check the magic and the header's length prefix on
// the first bytes, then read at most the header's Size + 32 more bytes
// (and refuse any trailing byte).
//
//	go test -count=1 -run TestRedteamReadSlurpsANonBackup ./internal/backup/
func TestRedteamReadSlurpsANonBackup(t *testing.T) {
	r := &endless{limit: 32 << 20}
	_, _, err := Read(r)
	if !errors.Is(err, ErrCorrupt) || r.read > 1<<20 {
		t.Fatalf("a stream of 'x' that does not start with %q: Read consumed %d bytes and returned %v; want ErrCorrupt after at most the first bytes",
			Magic[:len(Magic)-1], r.read, err)
	}
}
