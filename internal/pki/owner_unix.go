//go:build unix

package pki

import (
	"os"
	"syscall"
)

// ownedByRoot says whether root owns the file.
func ownedByRoot(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0
}
