package raftstore

import (
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
)

// walRecord is where a record of a WAL segment ends, and the entry it
// holds (0 for other records).
type walRecord struct {
	dataEnd int64 // after the record's bytes, before its padding
	end     int64 // after its padding (frames are 8-byte aligned)
	entry   uint64
}

// segmentRecords decodes one WAL segment with etcd's decoder.
func segmentRecords(t *testing.T, path string) []walRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := wal.NewDecoder(fileutil.NewFileReader(f))
	var out []walRecord
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := &walpb.Record{}
	for err = dec.Decode(rec); err == nil; err = dec.Decode(rec) {
		start := int64(0)
		if len(out) > 0 {
			start = out[len(out)-1].end
		}
		size := int64(binary.LittleEndian.Uint64(b[start:]) &^ (0xff << 56))
		r := walRecord{dataEnd: start + 8 + size, end: dec.LastOffset()}
		switch rec.GetType() {
		case wal.EntryType:
			r.entry = wal.MustUnmarshalEntry(rec.GetData()).GetIndex()
		case wal.CrcType:
			dec.UpdateCRC(rec.GetCrc())
		}
		out = append(out, r)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return out
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	names, err := walNames(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "wal", names[len(names)-1].name)
}

// TestTornTail cuts the last WAL segment at many offsets, with and
// without garbage after the cut, and checks that Open either repairs it
// into a log holding exactly the entries written wholly before the cut,
// or refuses it with an error; and that a repaired log takes new writes.
func TestTornTail(t *testing.T) {
	setSegmentSize(t, 24<<10)
	orig := filepath.Join(t.TempDir(), "orig")
	s := mustCreate(t, orig, "torn")
	const n = 120
	for i := uint64(1); i <= n; i++ {
		e := ent(i, 1, strings.Repeat("z", int(i*37%900)))
		mustAppend(t, s, hardState(1, 1, i-1), []*raftpb.Entry{e}, nil)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	last := lastSegment(t, orig)
	if filepath.Base(last) == "0000000000000000-0000000000000000.wal" {
		t.Fatal("one WAL segment only; the test wants several")
	}
	recs := segmentRecords(t, last)
	var firstInLast uint64 // the first entry in the last segment
	for _, r := range recs {
		if r.entry != 0 {
			firstInLast = r.entry
			break
		}
	}
	var lastInLast uint64
	for _, r := range recs {
		lastInLast = max(lastInLast, r.entry)
	}
	if firstInLast < 2 || lastInLast != n {
		t.Fatalf("last segment holds entries %d..%d", firstInLast, lastInLast)
	}
	headerEnd := int64(0) // after the records a segment starts with (crc, metadata, hard state)
	for _, r := range recs {
		if r.entry != 0 {
			break
		}
		headerEnd = r.end
	}
	dataEnd := recs[len(recs)-1].end

	// Offsets: for the first and last records and a random dozen between,
	// the boundary, a byte either side, the middle, the end of the data
	// before the padding; and a few inside the segment's header.
	rng := rand.New(rand.NewPCG(1, 2))
	offsets := []int64{0, 1, 7, 8, 9, headerEnd / 2, headerEnd - 1}
	picks := []int{0, 1, 2, len(recs) - 3, len(recs) - 2, len(recs) - 1}
	for range 12 {
		picks = append(picks, rng.IntN(len(recs)))
	}
	for _, i := range picks {
		prev := int64(0)
		if i > 0 {
			prev = recs[i-1].end
		}
		r := recs[i]
		offsets = append(offsets, r.end-1, r.end, r.end+1, (prev+r.end)/2, r.dataEnd)
	}
	slices.Sort(offsets)
	offsets = slices.Compact(offsets)

	opened, refused, repaired := 0, 0, 0
	for _, off := range offsets {
		if off < 0 || off > dataEnd {
			continue
		}
		for _, garbage := range []int{0, 1 + rng.IntN(700)} {
			dir := filepath.Join(t.TempDir(), "cut")
			copyDir(t, orig, dir)
			seg := lastSegment(t, dir)
			if err := os.Truncate(seg, off); err != nil {
				t.Fatal(err)
			}
			if garbage > 0 {
				g := make([]byte, garbage)
				for i := range g {
					g[i] = byte(1 + rng.IntN(255))
				}
				f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.Write(g)
				f.Close()
			}
			// The entries whose records end at or before the cut must be
			// there; one whose padding alone was cut (or overwritten by
			// garbage) may be.
			want, may := firstInLast-1, firstInLast-1
			for _, r := range recs {
				if r.entry != 0 && r.end <= off {
					want = r.entry
				}
				if r.entry != 0 && r.dataEnd <= off {
					may = r.entry
				}
			}

			log, tl := newTestLog(t)
			s, err := Open(dir, log)
			if err != nil {
				if garbage == 0 && off >= headerEnd {
					t.Fatalf("cut at %d (entries up to %d whole): Open refused a torn tail: %v", off, want, err)
				}
				if !strings.Contains(err.Error(), "raftstore: open") {
					t.Fatalf("cut at %d + %d garbage bytes: unclear error %v", off, garbage, err)
				}
				refused++
				continue
			}
			opened++
			if strings.Contains(tl.String(), "torn record") {
				repaired++
			}
			v := viewOf(t, s)
			if v.first != 1 || v.last < want || v.last > may {
				t.Fatalf("cut at %d + %d garbage bytes: log %d..%d, want 1..%d (the entries written wholly before the cut; up to %d with padding cut)", off, garbage, v.first, v.last, want, may)
			}
			want = v.last
			if v.hs.GetCommit() > want {
				t.Fatalf("cut at %d: commit %d past the last entry %d", off, v.hs.GetCommit(), want)
			}
			for i := uint64(1); i <= want; i++ {
				if v.data[i] != strings.Repeat("z", int(i*37%900)) || v.terms[i] != 1 {
					t.Fatalf("cut at %d: entry %d holds %d bytes", off, i, len(v.data[i]))
				}
			}
			// The repaired log goes on.
			mustAppend(t, s, hardState(2, 1, want), []*raftpb.Entry{ent(want+1, 2, "after")}, nil)
			s = reopen(t, s)
			v = viewOf(t, s)
			if v.last != want+1 || v.data[want+1] != "after" || v.terms[want+1] != 2 || v.hs.GetCommit() != want {
				t.Fatalf("cut at %d + %d garbage bytes: after an append past the repair: log ..%d, entry %q/%d, commit %d",
					off, garbage, v.last, v.data[want+1], v.terms[want+1], v.hs.GetCommit())
			}
			s.Close()
		}
	}
	t.Logf("%d cuts opened (%d with a repair), %d refused", opened, repaired, refused)
	if repaired == 0 || opened < len(offsets)/2 {
		t.Fatalf("%d opened, %d repaired of %d offsets", opened, repaired, len(offsets))
	}
}

// TestCorruptWALRefused flips a byte in the middle of the log (an older
// segment, and the last one away from its end): that is not a torn tail,
// and Open must refuse it rather than cut the log short.
func TestCorruptWALRefused(t *testing.T) {
	setSegmentSize(t, 24<<10)
	orig := filepath.Join(t.TempDir(), "orig")
	s := mustCreate(t, orig, "corrupt")
	for i := uint64(1); i <= 100; i++ {
		mustAppend(t, s, hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, strings.Repeat("q", 500))}, nil)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := walNames(filepath.Join(orig, "wal"))
	if err != nil || len(names) < 3 {
		t.Fatalf("%d segments (%v)", len(names), err)
	}
	for _, seg := range []string{names[1].name, names[len(names)-1].name} {
		dir := filepath.Join(t.TempDir(), "c")
		copyDir(t, orig, dir)
		p := filepath.Join(dir, "wal", seg)
		recs := segmentRecords(t, p)
		mid := recs[len(recs)/2]
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[mid.end-10] ^= 0x40 // inside a record's data
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		log, _ := newTestLog(t)
		if s, err := Open(dir, log); err == nil {
			last, _ := s.LastIndex()
			s.Close()
			t.Fatalf("%s corrupted mid-file: Open succeeded with log ..%d", seg, last)
		} else if !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("%s: unclear error: %v", seg, err)
		} else {
			t.Logf("%s: %v", seg, err)
		}
	}
}
