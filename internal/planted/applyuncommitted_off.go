//go:build !fence_bug_applyuncommitted

package planted

// ApplyUncommitted is off: see the package doc.
const ApplyUncommitted = false
