//go:build !fence_bug_token

package planted

// TokenRestart is off: see the package doc.
const TokenRestart = false
