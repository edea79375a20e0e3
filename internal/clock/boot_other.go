//go:build !linux

package clock

import "time"

var start = time.Now()

// bootNow falls back to Go's monotonic clock where CLOCK_BOOTTIME does not
// exist: there a host suspend is not counted.
func bootNow() time.Duration { return time.Since(start) }
