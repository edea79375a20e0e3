//go:build !fence_bug_replay

package planted

// ReplayExecuted is off: see the package doc.
const ReplayExecuted = false
