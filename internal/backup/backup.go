// Package backup is the file a backup of fence's state lives in (fence
// snapshot save, status, restore) and the token floor a restore needs.
//
// A file is the magic line "fence-backup-1\n", a uvarint length and the
// Header as JSON, the state (the fsm's snapshot encoding, Header.Size
// bytes), and the SHA-256 of everything before it. Read checks the
// checksum, the header, and the state's own SHA-256 and size against the
// header before it returns anything.
package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fencehq/fence/internal/fsm"
)

// Magic opens every backup file.
const Magic = "fence-backup-1\n"

// ErrCorrupt is wrapped by every error of Read about a file's contents.
var ErrCorrupt = errors.New("not an intact fence backup")

// Header describes the state a file holds.
type Header struct {
	// ClusterID, NodeID: the cluster and the node (its leader) it was taken from.
	ClusterID string `json:"cluster_id"`
	NodeID    string `json:"node_id"`
	// Index is the last log entry applied to the state; Term the raft term then.
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// TakenAt is the leader's clock when it copied the state.
	TakenAt time.Time `json:"taken_at"`
	// Token is the last fencing token granted in the state.
	Token  uint64 `json:"token"`
	Leases uint64 `json:"leases"`
	Locks  uint64 `json:"locks"`
	// Size and SHA256 (hex) are the state's.
	Size   uint64 `json:"size"`
	SHA256 string `json:"sha256"`
	// Version is the fence that took it.
	Version string `json:"version"`
}

// maxHeader and maxState bound what a reader accepts.
const (
	maxHeader = 1 << 16
	maxState  = 1 << 40
)

// Write writes a backup of state, described by h (its Size and SHA256 are
// filled in from state), to w.
func Write(w io.Writer, h Header, state []byte) error {
	sum := sha256.Sum256(state)
	h.Size, h.SHA256 = uint64(len(state)), hex.EncodeToString(sum[:])
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	all := sha256.New()
	out := io.MultiWriter(w, all)
	head := binary.AppendUvarint([]byte(Magic), uint64(len(hb)))
	for _, b := range [][]byte{head, hb, state} {
		if _, err := out.Write(b); err != nil {
			return err
		}
	}
	_, err = w.Write(all.Sum(nil))
	return err
}

// Read reads a backup from r and checks it: the magic line first, then the
// header, then exactly the state's announced size and the checksum, and
// nothing after them; the file's SHA-256, and the state's size and SHA-256
// against the header. It returns ErrCorrupt (wrapped, with what is wrong)
// for anything that is not an intact backup, having read no more of it
// than a backup of the header's size would be.
func Read(r io.Reader) (Header, []byte, error) {
	corrupt := func(format string, args ...any) (Header, []byte, error) {
		return Header{}, nil, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	br := bufio.NewReader(r)
	magic := make([]byte, len(Magic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != Magic {
		return corrupt("it does not start with %q", Magic[:len(Magic)-1])
	}
	n, err := binary.ReadUvarint(br)
	if err != nil || n > maxHeader {
		return corrupt("bad header length")
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(br, hb); err != nil {
		return corrupt("it is cut short in its header")
	}
	var h Header
	dec := json.NewDecoder(bytes.NewReader(hb))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return corrupt("header: %v", err)
	}
	if h.Size > maxState {
		return corrupt("its header announces %d bytes of state, more than a fence state can be", h.Size)
	}
	var state bytes.Buffer
	if _, err := io.CopyN(&state, br, int64(h.Size)); err != nil {
		return corrupt("it is cut short in its state")
	}
	sum := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, sum); err != nil {
		return corrupt("it is cut short in its checksum")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return corrupt("bytes follow its checksum")
	}
	all := sha256.New()
	for _, b := range [][]byte{binary.AppendUvarint([]byte(Magic), n), hb, state.Bytes()} {
		all.Write(b) // the bytes read, as Write writes them: a length written another way does not match
	}
	if !bytes.Equal(sum, all.Sum(nil)) {
		return corrupt("its checksum does not match (damaged or cut short)")
	}
	stateSum := sha256.Sum256(state.Bytes())
	if uint64(state.Len()) != h.Size || hex.EncodeToString(stateSum[:]) != h.SHA256 {
		return corrupt("the state's size or SHA-256 is not the header's")
	}
	return h, state.Bytes(), nil
}

// ReadFile reads and checks the backup in path (see Read).
func ReadFile(path string) (Header, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, nil, err
	}
	defer f.Close()
	h, state, err := Read(f)
	if err != nil {
		return Header{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, state, nil
}

// WriteFile writes a backup to path, which must not exist: into a
// temporary file beside it, fsynced, then renamed into place (and the
// directory fsynced), so path is either absent or a whole backup.
func WriteFile(path string, h Header, state []byte) (err error) {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s exists: give another file, or remove it first", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := Write(f, h, state); err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil { // it holds every lease's secret
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(f.Name(), path); err != nil { // fails if path appeared meanwhile
		return err
	}
	os.Remove(f.Name())
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Open reads and checks the backup in path (ReadFile), decodes its state,
// and refuses (ErrCorrupt) a file whose header does not describe that
// state: its last token, leases and locks must be the state's, so what
// status shows is what a restore restores.
func Open(path string) (Header, *fsm.State, error) {
	h, b, err := ReadFile(path)
	if err != nil {
		return Header{}, nil, err
	}
	st, err := fsm.Unmarshal(b)
	if err != nil {
		return Header{}, nil, fmt.Errorf("%s: its checksum holds, but its state does not decode (a newer fence wrote it?): %w", path, err)
	}
	if h.Token != st.Token() || h.Leases != uint64(st.NumLeases()) || h.Locks != uint64(st.NumLocks()) {
		return Header{}, nil, fmt.Errorf("%s: %w: its header (last token %d, %d leases, %d locks) does not describe its state (last token %d, %d leases, %d locks)",
			path, ErrCorrupt, h.Token, h.Leases, h.Locks, st.Token(), st.NumLeases(), st.NumLocks())
	}
	return h, st, nil
}

// headroom is how many tokens a restored cluster must have left below
// 2^63 (a signed 64-bit column holds every token up to 2^63-1).
const headroom = 1 << 30

// Floor is the token a restore raises the state to (fsm.State.RaiseToken),
// given the state's own last token: exactly one of floor (the largest token
// the old cluster may have handed out, when it is known: from the old
// cluster, or the largest token fenced storage has seen) and gap (how many
// tokens the old cluster may have granted after the backup, added to its
// last token) must be given, since only the operator can know how far the
// old cluster went on; and the floor must leave the restored cluster
// headroom tokens below 2^63.
func Floor(last, floor, gap uint64) (uint64, error) {
	const top = 1<<63 - 1 - headroom
	switch {
	case floor > 0 && gap > 0:
		return 0, errors.New("give --token-floor or --token-gap, not both")
	case floor > top:
		return 0, fmt.Errorf("--token-floor %d leaves fewer than %d tokens below 2^63 (a signed 64-bit column holds them up to 2^63-1)", floor, headroom)
	case floor > 0 && floor < last:
		return 0, fmt.Errorf("--token-floor %d is below the backup's own last token %d: the old cluster handed out at least that", floor, last)
	case floor > 0:
		return floor, nil
	case gap > 0:
		if last > top || gap > top-last {
			return 0, fmt.Errorf("--token-gap %d: the backup's last token %d plus it leaves fewer than %d tokens below 2^63", gap, last, headroom)
		}
		return last + gap, nil
	}
	return 0, fmt.Errorf("a restore needs a token floor: the old cluster may have granted tokens above the backup's last one (%d) after it was taken, "+
		"and a restored cluster must never hand one out again. Give --token-floor N, N the largest token it may have handed out "+
		"(its members' fence_last_token, or the largest fence column of your fenced tables), or --token-gap N, N a bound on the grants it made after the backup "+
		"(e.g. a day's grants, many times over)", last)
}
