//go:build fence_bug_applyuncommitted

package planted

// ApplyUncommitted is ON: this binary carries a planted bug (see the package doc).
const ApplyUncommitted = true
