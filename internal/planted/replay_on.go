//go:build fence_bug_replay

package planted

// ReplayExecuted is ON: this binary carries a planted bug (see the package doc).
const ReplayExecuted = true
