//go:build !fence_bug_deposed

package planted

// DeposedRenewal is off: see the package doc.
const DeposedRenewal = false
