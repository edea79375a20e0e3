package pglease_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the paused-holder helper when asked to (see
// TestPausedHolderFencedWriteRefused), and otherwise fails the package if a
// test leaves a goroutine behind: a lease's renewal loop or deadline timer
// that outlives its end.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(holderProcess())
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}
