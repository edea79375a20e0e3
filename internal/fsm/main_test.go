package fsm

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's default of 100 cases to 3000 per property, unless
// -rapid.checks is given on the command line.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		_ = flag.Set("rapid.checks", "3000")
	}
	os.Exit(m.Run())
}
