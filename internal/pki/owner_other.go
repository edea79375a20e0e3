//go:build !unix

package pki

import "os"

// ownedByRoot is false where files have no Unix owner: a key file must then
// be private to its owner (mode 0600).
func ownedByRoot(os.FileInfo) bool { return false }
