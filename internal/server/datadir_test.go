package server

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testdata/legacy-raftdb.tar.gz is a single-node data dir written by fence
// before raft-wal (raft.db, raft-boltdb; data format 1): 20 lock cycles, then
// locks held, three snapshots, and a grant only in the log.
func legacyDataDir(t *testing.T) string { return extractDataDir(t, "testdata/legacy-raftdb.tar.gz") }

// testdata/format2-hashicorp.tar.gz is a single-node data dir written by the
// last fence on the hashicorp/raft engine (01eddb7, data format 2: FORMAT,
// wal/ of raft-wal, snapshots/): three `fence run` grants.
func format2DataDir(t *testing.T) string {
	return extractDataDir(t, "testdata/format2-hashicorp.tar.gz")
}

// extractDataDir unpacks a data dir archive into a temp dir.
func extractDataDir(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		} else if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, dir) {
			t.Fatalf("bad path in archive: %s", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o750); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o640); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The data dir's files, as the node package names them.
const (
	formatFile = "FORMAT"
	lockFile   = "LOCK"
	dataFormat = "fence data format 3\n"
)

// newServerOn starts a server on dir, as a restart would. It serves as `fence serve` does by default: TLS with the dev certificates
// it makes in the data dir, so a refused dir must stay unchanged by that too.
func newServerOn(t *testing.T, dir string) (*Server, error) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir, cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr = dir, "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Logger = testLogger()
	s, err := New(cfg)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// TestOldDataDirIsRefused: a data dir written by an earlier fence (format 1,
// or format 2 of the hashicorp/raft engine) is refused with what to do, and
// left exactly as it was. Before the format
// file, fence migrated raft.db without looking, and when both raft.db and
// wal/ existed (a rollback to the earlier fence, then this one again) it
// retired raft.db and reused the stale wal/: term and vote went backwards.
func TestOldDataDirIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) string
	}{
		{"raft.db of fence before raft-wal", legacyDataDir},
		{"format 2 of the hashicorp/raft engine", format2DataDir},
		{"raft.db and wal/ after a rollback", func(t *testing.T) string {
			dir := legacyDataDir(t)
			if err := os.Mkdir(filepath.Join(dir, "wal"), 0o750); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"wal/ without a format file", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "wal"), 0o750); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t)
			before := listDir(t, dir)
			_, err := newServerOn(t, dir)
			if err == nil || !(strings.Contains(err.Error(), "written by an earlier fence (data format 1") || strings.Contains(err.Error(), `"fence data format 2", written by the hashicorp/raft engine`)) || !strings.Contains(err.Error(), "empty --data-dir") {
				t.Fatalf("a data dir of the earlier format was not refused with what to do: %v", err)
			}
			if after := listDir(t, dir); !slices.Equal(before, after) {
				t.Fatalf("the refused data dir was changed: %v → %v", before, after)
			}
		})
	}
}

// TestOtherFormatIsRefused: a format file of another version is refused,
// and one of a known earlier version (2: the hashicorp/raft engine) is
// refused with its name and the way forward; either way nothing changes.
func TestOtherFormatIsRefused(t *testing.T) {
	for _, tc := range []struct{ format, want string }{
		{"fence data format 4\n", "another fence version"},
		{"fence data format 2\n", "hashicorp/raft engine"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, formatFile), []byte(tc.format), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, "wal"), 0o750); err != nil {
			t.Fatal(err)
		}
		before := listDir(t, dir)
		_, err := newServerOn(t, dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "empty --data-dir") {
			t.Fatalf("%q: not refused with what to do: %v", tc.format, err)
		}
		if after := listDir(t, dir); !slices.Equal(before, after) {
			t.Fatalf("%q: the refused data dir was changed: %v → %v", tc.format, before, after)
		}
	}
}

// TestFormatFileWritten: a new data dir gets the format file, and a restart
// reads it back.
func TestFormatFileWritten(t *testing.T) {
	dir := t.TempDir()
	s, err := newServerOn(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, formatFile)); err != nil || string(b) != dataFormat {
		t.Fatalf("format file: %q %v", b, err)
	}
	s.Close()
	if _, err := newServerOn(t, dir); err != nil { // on another raft port: a single node may move
		t.Fatalf("restart on its own data dir: %v", err)
	}
}

// listDir lists every path under dir (names, sizes), to see that nothing changed.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if path == filepath.Join(dir, lockFile) {
			return nil // taken (and left) by the refused server: not data
		}
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		out = append(out, fmt.Sprintf("%s %d", strings.TrimPrefix(path, dir), size))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDataDirInUseIsRefused(t *testing.T) {
	n := startNode(t, nil)
	cfg := DefaultConfig()
	cfg.Insecure = true // these tests dial plaintext; tls_test.go covers TLS
	cfg.DataDir, cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr = n.dir, "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Logger = testLogger()
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), "in use by another fence process") {
		t.Fatalf("second server on the same data dir: %v", err)
	}
}

// TestLostRaftLogIsRefused: a data dir that has lived (FORMAT) but lost its
// raft log is refused: the node would come back as a member with no memory
// of what it voted for and acknowledged (with its bootstrap list, as a
// voter at once), and a majority of such amnesiacs loses acknowledged writes.
func TestLostRaftLogIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := newServerOn(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.RemoveAll(filepath.Join(dir, "raft")); err != nil {
		t.Fatal(err)
	}
	if _, err := newServerOn(t, dir); err == nil || !strings.Contains(err.Error(), "its log is lost") || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("a data dir without its raft log was not refused with what to do: %v", err)
	}
}
