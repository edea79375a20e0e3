//go:build fence_bug_regrant

package planted

// Regrant is ON: this binary carries a planted bug (see the package doc).
const Regrant = true
