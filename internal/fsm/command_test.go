package fsm

import "testing"

// TestNames: kinds and codes print their names, and values past the last
// one (or a kind with no name) print their number instead of panicking.
func TestNames(t *testing.T) {
	for k, want := range map[Kind]string{0: "kind(0)", KindCreateLease: "create-lease", KindForceRelease: "force-release", 13: "kind(13)", 255: "kind(255)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d) = %q, want %q", uint8(k), got, want)
		}
	}
	for c, want := range map[Code]string{OK: "ok", TooManyCalls: "too many calls in flight", RanRecently: "ran recently", PermitsMismatch: "permits mismatch", 16: "code(16)", 255: "code(255)"} {
		if got := c.String(); got != want {
			t.Errorf("Code(%d) = %q, want %q", uint8(c), got, want)
		}
	}
}
