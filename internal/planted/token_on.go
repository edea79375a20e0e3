//go:build fence_bug_token

package planted

// TokenRestart is ON: this binary carries a planted bug (see the package doc).
const TokenRestart = true
