package redislock_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a lease's
// renewal loop or deadline timer that outlives its end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
