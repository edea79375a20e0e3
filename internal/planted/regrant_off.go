//go:build !fence_bug_regrant

package planted

// Regrant is off: see the package doc.
const Regrant = false
