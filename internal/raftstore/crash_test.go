package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

const (
	crashDirEnv  = "RAFTSTORE_CRASH_CHILD_DIR"
	crashSeedEnv = "RAFTSTORE_CRASH_CHILD_SEED"
	crashModeEnv = "RAFTSTORE_CRASH_CHILD_MODE"
	crashRounds  = 5
)

// crashData is the payload of entry (index, term): its size varies from a
// few bytes to 40 KB, and its content is checked byte for byte.
func crashData(index, term uint64) []byte {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", index, term)
	x := h.Sum64()
	n := int(x % 3000)
	if x%50 == 0 {
		n = 40 << 10
	}
	return filler(fmt.Sprintf("e%d/%d/", index, term), n, x)
}

// crashSnapData is the payload of a snapshot: kind "self" for one taken by
// SaveSnapshot (term 0), "recv" for one received through Append.
func crashSnapData(kind string, index, term uint64) []byte {
	return filler(fmt.Sprintf("%s/%d/%d/", kind, index, term), int(index%5000), index)
}

func filler(prefix string, n int, x uint64) []byte {
	b := make([]byte, len(prefix), len(prefix)+n)
	copy(b, prefix)
	for i := range n {
		b = append(b, byte('a'+(x+uint64(i))%26))
	}
	return b
}

// TestHelperProcess is the child of TestCrashRecovery: it opens (or
// creates) the store in $RAFTSTORE_CRASH_CHILD_DIR and writes to it until it
// is killed, printing what it does:
//
//	begin append <from> <to> <term> <commit>   before Append(hs, entries from..to)
//	acked append <from> <to> <term> <commit>   after that Append returned
//	begin recv <index> <term> <from> <to> <commit> / acked recv ...
//	                                           the same for an Append of a received snapshot
//	begin commit <commit> <term> / acked commit ...
//	                                           the same for an Append of a hard state alone
//	acked snap <index>                         after SaveSnapshot(index) returned
//
// Each line is one write to the pipe, so a line is either whole or absent.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the child process of TestCrashRecovery")
	}
	if os.Getenv(crashModeEnv) == "commit-idle" {
		commitIdleChild(dir)
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	crashChild(dir, seed)
	os.Exit(0)
}

// commitIdleChild writes entries, then a hard state alone, says so and
// waits to be killed.
func commitIdleChild(dir string) {
	s, err := Create(dir, []byte("idle"), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err == nil {
		err = s.Append(hardState(1, 1, 0), ents(1, 5, 1), nil)
	}
	if err == nil {
		err = s.Append(hardState(1, 1, 3), nil, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	os.Stdout.WriteString("acked commit 3 1\n")
	time.Sleep(20 * time.Second)
	os.Exit(4)
}

func crashChild(dir string, seed uint64) {
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "child: "+format+"\n", args...)
		os.Exit(2)
	}
	wal.SegmentSizeBytes = 96 << 10 // cut segments often, so releases happen
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var (
		s   *Store
		err error
	)
	if Exists(dir) {
		s, err = Open(dir, log)
	} else {
		s, err = Create(dir, []byte("crash"), log)
	}
	if err != nil {
		die("%v", err)
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format+"\n", args...)
		outMu.Lock()
		defer outMu.Unlock()
		if _, err := os.Stdout.WriteString(line); err != nil {
			os.Exit(3)
		}
	}

	hs, _, _ := s.InitialState()
	last, _ := s.LastIndex()
	lastTerm, _ := s.Term(last)
	snap, _ := s.Snapshot()
	term, commit := max(hs.GetTerm(), lastTerm), hs.GetCommit()
	rng := rand.New(rand.NewPCG(seed, 1))

	// SaveSnapshot of the applied index, on its own goroutine.
	var applied atomic.Uint64
	applied.Store(commit)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 2))
		snapped := snap.GetMetadata().GetIndex()
		for {
			time.Sleep(time.Duration(20+rng.IntN(60)) * time.Millisecond)
			a := applied.Load()
			if a <= snapped {
				continue
			}
			err := s.SaveSnapshot(a, confState(1, 2, 3), crashSnapData("self", a, 0), uint64(rng.IntN(50)))
			if errors.Is(err, raft.ErrSnapOutOfDate) {
				continue // a received snapshot overtook it
			}
			if err != nil {
				die("SaveSnapshot(%d): %v", a, err)
			}
			snapped = a
			say("acked snap %d", a)
		}
	}()

	deadline := time.Now().Add(4 * time.Second) // the parent kills it long before
	for op := 0; op < 200000 && time.Now().Before(deadline); op++ {
		// risky: the op dropped entries the WAL still holds (an overwrite
		// shortening the log, a received snapshot inside it) or wrote a
		// hard state alone; then snapshot and idle more often, so a kill
		// finds that state at rest.
		risky := false
		r := rng.IntN(100)
		switch {
		case r < 4: // a snapshot from a new leader: past the end of the log, or inside its uncommitted tail
			term++
			idx := last + 1 + uint64(rng.IntN(5))
			if r < 2 && last > commit {
				idx = commit + 1 + uint64(rng.IntN(int(last-commit)))
				risky = true
			}
			n := uint64(rng.IntN(3))
			from, to := idx+1, idx+n
			var es []*raftpb.Entry
			for i := from; i <= to; i++ {
				es = append(es, &raftpb.Entry{Index: new(i), Term: new(term), Data: crashData(i, term)})
			}
			c := idx + uint64(rng.IntN(int(n)+1))
			sn := snapshotAt(idx, term, confState(1, 2, 3), string(crashSnapData("recv", idx, term)))
			say("begin recv %d %d %d %d %d", idx, term, from, to, c)
			if err := s.Append(hardState(term, 0, c), es, sn); err != nil {
				die("Append(recv %d): %v", idx, err)
			}
			say("acked recv %d %d %d %d %d", idx, term, from, to, c)
			last, commit = max(to, idx), c
		case r >= 10 && r < 15 && last > commit: // the commit index moves, nothing else
			c := commit + 1 + uint64(rng.IntN(int(last-commit)))
			if rng.IntN(2) == 0 {
				c = last
			}
			say("begin commit %d %d", c, term)
			if err := s.Append(hardState(term, 1, c), nil, nil); err != nil {
				die("Append(commit %d): %v", c, err)
			}
			say("acked commit %d %d", c, term)
			commit, risky = c, true
		default:
			from := last + 1
			if r < 10 && last > commit { // a new leader overwrites the uncommitted tail
				term++
				from = commit + 1 + uint64(rng.IntN(int(last-commit)))
			}
			to := from + uint64(rng.IntN(4))
			risky = to < last
			var es []*raftpb.Entry
			for i := from; i <= to; i++ {
				es = append(es, &raftpb.Entry{Index: new(i), Term: new(term), Data: crashData(i, term)})
			}
			c := commit + uint64(rng.IntN(int(to-commit)+1))
			say("begin append %d %d %d %d", from, to, term, c)
			if err := s.Append(hardState(term, 1, c), es, nil); err != nil {
				die("Append(%d..%d): %v", from, to, err)
			}
			say("acked append %d %d %d %d", from, to, term, c)
			last, commit = to, c
		}
		applied.Store(commit)
		if risky && rng.IntN(2) == 0 {
			// SaveSnapshot on this goroutine too, right at the commit index.
			err := s.SaveSnapshot(commit, confState(1, 2, 3), crashSnapData("self", commit, 0), uint64(rng.IntN(5)))
			switch {
			case err == nil:
				say("acked snap %d", commit)
			case !errors.Is(err, raft.ErrSnapOutOfDate):
				die("SaveSnapshot(%d): %v", commit, err)
			}
		}
		if rng.IntN(10) == 0 || (risky && rng.IntN(2) == 0) {
			// Idle after an ack now and then, as a node between requests:
			// a kill landing here finds nothing in flight that would flush
			// what the last Append left unsynced, or overwrite what it
			// dropped.
			time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond)
		}
	}
}

// crashModel is what the parent knows must be in the log: entries lo..hi
// (terms[i-lo]) after a base (a snapshot's index and term), and lower
// bounds for the hard state and the snapshot index.
type crashModel struct {
	base, baseTerm uint64
	terms          []uint64 // entry base+1+i has term terms[i]
	commit, term   uint64
	snap           uint64
}

func (m crashModel) hi() uint64 { return m.base + uint64(len(m.terms)) }

func (m crashModel) clone() crashModel {
	m.terms = append([]uint64(nil), m.terms...)
	return m
}

// appendEntries is raft's append: entries from..to at term replace all
// from from on.
func (m *crashModel) appendEntries(from, to, term uint64) {
	if from <= m.base {
		panic(fmt.Sprintf("append at %d below base %d", from, m.base))
	}
	m.terms = m.terms[:min(uint64(len(m.terms)), from-m.base-1)]
	for i := from; i <= to; i++ {
		m.terms = append(m.terms, term)
	}
}

func (m *crashModel) recv(idx, term uint64) {
	m.base, m.baseTerm, m.terms = idx, term, nil
	m.snap = max(m.snap, idx)
}

func (m crashModel) termAt(i uint64) (uint64, bool) {
	switch {
	case i == m.base:
		return m.baseTerm, true
	case i > m.base && i <= m.hi():
		return m.terms[i-m.base-1], true
	}
	return 0, false
}

// crashOp is one begin/acked pair of the child's output.
type crashOp struct {
	kind              string // "append" or "recv"
	from, to, term, c uint64
	idx               uint64 // recv: the snapshot's index
	line              string
}

func (op crashOp) apply(m *crashModel, entries uint64) {
	if op.kind == "recv" {
		m.recv(op.idx, op.term)
	}
	if entries > 0 {
		m.appendEntries(op.from, op.from+entries-1, op.term)
	}
	m.term = max(m.term, op.term)
}

// parseCrashOutput applies the acked operations to m and returns the
// operation begun but not acked, if any. Only whole lines count.
func parseCrashOutput(t *testing.T, out []byte, m *crashModel) (pending *crashOp, acked int) {
	t.Helper()
	lines := strings.Split(string(out), "\n")
	lines = lines[:len(lines)-1] // after the last newline: empty, or a line cut short
	for _, line := range lines {
		f := strings.Fields(line)
		num := func(i int) uint64 {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				t.Fatalf("bad child line %q", line)
			}
			return v
		}
		switch {
		case len(f) == 3 && f[0] == "acked" && f[1] == "snap":
			m.snap = max(m.snap, num(2))
			acked++
		case len(f) == 4 && f[1] == "commit":
			if f[0] == "begin" {
				pending = nil // changes no entries; only its hard state, which is no lower bound
				continue
			}
			m.commit = max(m.commit, num(2))
			m.term = max(m.term, num(3))
			pending = nil
			acked++
		case len(f) == 6 && f[1] == "append":
			op := crashOp{kind: "append", from: num(2), to: num(3), term: num(4), c: num(5), line: line}
			if f[0] == "begin" {
				pending = &op
				continue
			}
			op.apply(m, op.to-op.from+1)
			m.commit = max(m.commit, op.c)
			pending = nil
			acked++
		case len(f) == 7 && f[1] == "recv":
			op := crashOp{kind: "recv", idx: num(2), term: num(3), from: num(4), to: num(5), c: num(6), line: line}
			if f[0] == "begin" {
				pending = &op
				continue
			}
			op.apply(m, op.to+1-op.from)
			m.commit = max(m.commit, op.c)
			pending = nil
			acked++
		default:
			t.Fatalf("bad child line %q", line)
		}
	}
	return pending, acked
}

// consistent reports why the reopened view v does not match model m, or "".
func consistent(v view, m crashModel) string {
	if v.hs.GetCommit() < m.commit || v.hs.GetTerm() < m.term {
		return fmt.Sprintf("hard state term %d commit %d older than acked term %d commit %d", v.hs.GetTerm(), v.hs.GetCommit(), m.term, m.commit)
	}
	if v.hs.GetCommit() > v.last {
		return fmt.Sprintf("commit %d past the last index %d", v.hs.GetCommit(), v.last)
	}
	if v.snapIndex < m.snap || v.snapIndex < m.base {
		return fmt.Sprintf("snapshot at %d older than acked %d (log base %d)", v.snapIndex, m.snap, m.base)
	}
	if v.snapIndex > v.hs.GetCommit() {
		return fmt.Sprintf("snapshot at %d above commit %d", v.snapIndex, v.hs.GetCommit())
	}
	if v.snapIndex > 0 && v.snapData != string(crashSnapData("self", v.snapIndex, 0)) &&
		v.snapData != string(crashSnapData("recv", v.snapIndex, v.snapTerm)) {
		return fmt.Sprintf("snapshot at %d/%d holds %.40q", v.snapIndex, v.snapTerm, v.snapData)
	}
	if t, ok := m.termAt(v.snapIndex); ok && t != v.terms[v.snapIndex] {
		return fmt.Sprintf("term at snapshot index %d is %d, want %d", v.snapIndex, v.terms[v.snapIndex], t)
	}
	if want := max(m.hi(), v.snapIndex); v.last != want {
		return fmt.Sprintf("last index %d, want %d", v.last, want)
	}
	for i := v.snapIndex + 1; i <= v.last; i++ {
		t, _ := m.termAt(i)
		if v.terms[i] != t {
			return fmt.Sprintf("entry %d has term %d, want %d", i, v.terms[i], t)
		}
		if v.data[i] != string(crashData(i, t)) {
			return fmt.Sprintf("entry %d/%d holds the wrong data", i, t)
		}
	}
	return ""
}

// candidates are the logs the disk may hold after a crash: the acked one,
// and the acked one with the pending operation partly or fully done (a
// prefix of its entries, as wal.Save writes them in order).
func candidates(m crashModel, pending *crashOp) []crashModel {
	out := []crashModel{m}
	if pending == nil {
		return out
	}
	n := pending.to + 1 - pending.from
	first := uint64(1)
	if pending.kind == "recv" {
		first = 0 // the snapshot alone
	}
	for k := first; k <= n; k++ {
		c := m.clone()
		pending.apply(&c, k)
		c.term = m.term // the pending hard state is not a lower bound
		out = append(out, c)
	}
	return out
}

func viewModel(v view) crashModel {
	m := crashModel{base: v.first - 1, baseTerm: v.terms[v.first-1], commit: v.hs.GetCommit(), term: v.hs.GetTerm(), snap: v.snapIndex}
	for i := v.first; i <= v.last; i++ {
		m.terms = append(m.terms, v.terms[i])
	}
	return m
}

// TestCrashRecovery kills a child process writing to the store with
// SIGKILL at random moments and checks after each kill that the reopened
// log holds everything the child was told was durable.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes; -short")
	}
	dir := filepath.Join(t.TempDir(), "raft")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var m crashModel // the empty log
	totalAcked := 0
	for round := range crashRounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=30s")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashSeedEnv+"="+strconv.FormatUint(seed+uint64(round), 10))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := time.Duration(150+rng.IntN(1350)) * time.Millisecond
		timer := time.AfterFunc(killAfter, func() { cmd.Process.Signal(syscall.SIGKILL) })
		out, readErr := io.ReadAll(stdout) // until the child dies
		timer.Stop()
		cmd.Process.Signal(syscall.SIGKILL) // if it closed stdout some other way
		waitErr := cmd.Wait()
		if readErr != nil {
			t.Fatal(readErr)
		}
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die of SIGKILL: %v\nstderr:\n%s", round, waitErr, stderr.String())
		}

		pending, acked := parseCrashOutput(t, out, &m)
		totalAcked += acked
		if !Exists(dir) && acked == 0 && pending == nil && m.hi() == 0 {
			t.Logf("round %d: killed after %v, before Create finished", round, killAfter)
			continue
		}
		log, _ := newTestLog(t)
		s, err := Open(dir, log)
		if err != nil {
			t.Fatalf("round %d (killed after %v, %d acked): Open: %v\nchild stderr:\n%s", round, killAfter, acked, err, stderr.String())
		}
		v := viewOf(t, s)
		var why []string
		ok := false
		for _, c := range candidates(m, pending) {
			r := consistent(v, c)
			if r == "" {
				ok = true
				break
			}
			why = append(why, r)
		}
		if !ok {
			t.Fatalf("round %d (killed after %v, %d acked, pending %+v): reopened log %d..%d (snapshot %d, hs %v) matches no possible state:\n%s\nchild stderr:\n%s",
				round, killAfter, acked, pending, v.first, v.last, v.snapIndex, v.hs, strings.Join(why, "\n"), stderr.String())
		}
		t.Logf("round %d: killed after %v: %d acked; log %d..%d, snapshot %d, commit %d, pending op applied: %v",
			round, killAfter, acked, v.first, v.last, v.snapIndex, v.hs.GetCommit(), pending != nil && consistent(v, m) != "")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		m = viewModel(v) // the next child starts from what is on disk
	}
	if totalAcked == 0 {
		t.Fatal("the children acked nothing")
	}
}

// TestCrashAfterCommitOnlyAppend kills the child once an Append of a hard
// state alone has returned, with nothing else written after it: etcd's
// wal.Save leaves a commit-only change in its buffer, so the store must
// sync it itself for the ack to hold.
func TestCrashAfterCommitOnlyAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process; -short")
	}
	dir := filepath.Join(t.TempDir(), "raft")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=30s")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashModeEnv+"=commit-idle")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Signal(syscall.SIGKILL)
	line := make([]byte, len("acked commit 3 1\n"))
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "acked commit 3 1\n" {
		t.Fatalf("child said %q (%v)\nstderr:\n%s", line, err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	s := mustOpen(t, dir)
	defer s.Close()
	v := wantLog(t, s, 1, 5, func(uint64) uint64 { return 1 })
	wantHardState(t, v.hs, 1, 1, 3)
}
