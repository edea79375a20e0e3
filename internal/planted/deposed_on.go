//go:build fence_bug_deposed

package planted

// DeposedRenewal is ON: this binary carries a planted bug (see the package doc).
const DeposedRenewal = true
