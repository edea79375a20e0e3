package backup

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sample() (Header, []byte) {
	return Header{ClusterID: "00000000000000ab", NodeID: "n1", Index: 42, Term: 3,
		TakenAt: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC), Token: 1000, Leases: 2, Locks: 1, Version: "dev"}, []byte("the state's bytes")
}

func encode(t *testing.T) []byte {
	t.Helper()
	h, state := sample()
	var buf bytes.Buffer
	if err := Write(&buf, h, state); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	h, state := sample()
	got, gotState, err := Read(bytes.NewReader(encode(t)))
	if err != nil {
		t.Fatal(err)
	}
	h.Size, h.SHA256 = uint64(len(state)), got.SHA256
	if got != h || !bytes.Equal(gotState, state) || len(got.SHA256) != 64 {
		t.Fatalf("read back %+v %q, want %+v %q", got, gotState, h, state)
	}
}

// TestEveryDamageIsRefused: every single flipped bit and every cut-short
// prefix of a backup is refused as ErrCorrupt; none reads as a backup.
func TestEveryDamageIsRefused(t *testing.T) {
	b := encode(t)
	for i := range len(b) * 8 {
		d := bytes.Clone(b)
		d[i/8] ^= 1 << (i % 8)
		if _, _, err := Read(bytes.NewReader(d)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d flipped: %v, want ErrCorrupt", i, err)
		}
	}
	for n := range len(b) {
		if _, _, err := Read(bytes.NewReader(b[:n])); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut to %d of %d bytes: %v, want ErrCorrupt", n, len(b), err)
		}
	}
	if _, _, err := Read(bytes.NewReader(append(bytes.Clone(b), 0))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a byte appended: %v, want ErrCorrupt", err)
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b")
	h, state := sample()
	if err := WriteFile(path, h, state); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v, want 0600 (it holds lease secrets)", fi.Mode(), err)
	}
	if _, got, err := ReadFile(path); err != nil || !bytes.Equal(got, state) {
		t.Fatalf("read back: %q %v", got, err)
	}
	if err := WriteFile(path, h, []byte("other")); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second write to the same file: %v, want a refusal", err)
	}
	if _, got, _ := ReadFile(path); !bytes.Equal(got, state) {
		t.Fatal("the refused write changed the file")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

func TestFloor(t *testing.T) {
	const last = 1000
	const top = 1<<63 - 1 - headroom // the largest floor: headroom tokens stay below 2^63
	for _, c := range []struct {
		floor, gap, want uint64
		err              string
	}{
		{0, 0, 0, "needs a token floor"},
		{5000, 0, 5000, ""},
		{1000, 0, 1000, ""},
		{999, 0, 0, "below the backup's own last token"},
		{0, 4000, 5000, ""},
		{5000, 4000, 0, "not both"},
		{top, 0, top, ""},
		{top + 1, 0, 0, "fewer than"},
		{1<<63 - 1, 0, 0, "fewer than"},
		{1 << 63, 0, 0, "fewer than"},
		{0, top - last, top, ""},
		{0, top - last + 1, 0, "fewer than"},
		{0, 1<<64 - 1, 0, "fewer than"},
	} {
		got, err := Floor(last, c.floor, c.gap)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("floor %d gap %d: %d %v, want an error with %q", c.floor, c.gap, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("floor %d gap %d: %d %v, want %d", c.floor, c.gap, got, err, c.want)
		}
	}
}

// FuzzRead: no input panics Read, every refusal is ErrCorrupt, and
// whatever it accepts, written again, reads back.
func FuzzRead(f *testing.F) {
	h, state := sample()
	var buf bytes.Buffer
	if err := Write(&buf, h, state); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, state, err := Read(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("an error that is not ErrCorrupt: %v", err)
			}
			return
		}
		var again bytes.Buffer
		if err := Write(&again, h, state); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Read(&again); err != nil {
			t.Fatalf("what Read accepted does not read back once written: %v", err)
		}
	})
}
