package pki_test

// Red-team tests of package pki. Each FAILS on the code it was written
// against, because of the hole its comment describes.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencehq/fence/internal/pki"
)

// FINDING: private keys with loose permissions are taken without a word.
// A node key (or the dev CA's key) that is group/world readable — copied
// with cp/tar/scp that kept or widened its mode, or unpacked from a
// config-management template as 0644 — is loaded by NewReloader (fence
// serve, SIGHUP reloads) and reused by EnsureDev, so any local user can
// read it and impersonate the member (or, with ca.key, mint certificates
// for the whole cluster). fence writes its own keys 0600 and then never
// checks again.
// Fix: in pki.load (and EnsureDev for ca.key) refuse a key file whose mode
// has any of 0o077 set (as ssh does), with "chmod 600 <file>" in the error;
// or at least log a warning.
func TestRedteamTLSLooseKeyPermissionsAccepted(t *testing.T) {
	dir := t.TempDir()
	files, err := pki.EnsureDev(dir, "n1", pki.DevHosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{files.Key, filepath.Join(dir, pki.CAKeyFile)} {
		if err := os.Chmod(k, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pki.NewReloader(files); err == nil {
		t.Errorf("NewReloader loaded the world-readable key %s", files.Key)
	}
	if err := os.Remove(filepath.Join(dir, pki.ClientCertFile)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, pki.ClientKeyFile))
	if _, err := pki.EnsureDev(dir, "n1", pki.DevHosts); err == nil {
		t.Errorf("EnsureDev signed a new client certificate with the world-readable CA key %s", filepath.Join(dir, pki.CAKeyFile))
	}
}
