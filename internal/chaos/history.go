package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Op is one operation a worker performed, as recorded in its history file.
// Times are CLOCK_MONOTONIC nanoseconds, the one clock every process on the
// machine shares (workers in a shifted time namespace correct for it).
type Op struct {
	Client string `json:"client"` // the worker and incarnation; a new id after an unknown outcome
	Seq    int    `json:"seq"`    // per client
	Kind   string `json:"kind"`   // acquire, release, status, claim, read, write, kvget, kvput
	Lock   string `json:"lock"`   // the lock, and the resource it guards
	Token  uint64 `json:"token,omitempty"`
	Value  string `json:"value,omitempty"`
	// Call and Return bound the operation; Return 0 means it never returned
	// or its outcome is unknown (open: it may take effect any time after Call).
	Call   int64 `json:"call"`
	Return int64 `json:"return,omitempty"`
	// Outcome: ok, stale (fencing refused), fail (no effect), unknown.
	Outcome string `json:"outcome,omitempty"`
	// ValidUntil is the lease deadline the worker believed at Return
	// (acquire, and the writes it made under that grant).
	ValidUntil int64 `json:"valid_until,omitempty"`
	// Seen is when the worker read ValidUntil from the client.
	Seen int64 `json:"seen,omitempty"`
	// TTL is the lease TTL the worker asked for (acquire); Lease is the
	// lease's number, whose TTL as the server granted it the proxy saw.
	TTL   time.Duration `json:"ttl,omitempty"`
	Lease uint64        `json:"lease,omitempty"`
	// Store is the database of a row operation (claim, read, write); Tx
	// says it ran inside a REPEATABLE READ transaction.
	Store string `json:"store,omitempty"`
	Tx    bool   `json:"tx,omitempty"`
	// Highest is the token a stale write was refused for.
	Highest uint64 `json:"highest,omitempty"`
	// Permits, Slot and Shared describe a grant of a semaphore or a
	// read-write lock (macquire, mrelease): the lock's permit count, the
	// permit's slot, a reader's grant.
	Permits int  `json:"permits,omitempty"`
	Slot    int  `json:"slot,omitempty"`
	Shared  bool `json:"shared,omitempty"`
	// Err explains fail and unknown.
	Err string `json:"err,omitempty"`
}

// Outcomes.
const (
	OK      = "ok"
	Stale   = "stale" // fencing refused
	Fail    = "fail"  // no effect
	Unknown = "unknown"
	// Serialization: PostgreSQL refused the write of a REPEATABLE READ
	// transaction (SQLSTATE 40001) and it was rolled back: no effect.
	Serialization = "serialization"
	// BadSignature: the row refused the grant's signed token (no effect);
	// every grant's must verify for its lock, so each is a violation.
	BadSignature = "bad-signature"
)

// Open reports whether the operation may take effect at any time after its call.
func (o *Op) Open() bool { return o.Return == 0 || o.Outcome == Unknown }

func (o *Op) String() string {
	ret := "open"
	if o.Return != 0 {
		ret = strconv.FormatInt(o.Return, 10)
	}
	s := fmt.Sprintf("%s#%d %s(%s", o.Client, o.Seq, o.Kind, o.Lock)
	if o.Store != "" {
		s += "@" + o.Store
		if o.Tx {
			s += " in tx"
		}
	}
	if o.Token != 0 {
		s += fmt.Sprintf(", token %d", o.Token)
	}
	if o.Value != "" {
		s += ", value " + o.Value
	}
	s += fmt.Sprintf(") [%d, %s] → %s", o.Call, ret, o.Outcome)
	if o.Err != "" {
		s += " (" + o.Err + ")"
	}
	return s
}

// monoOffset is this process's time-namespace offset of CLOCK_MONOTONIC,
// subtracted so every process records on the same clock.
var monoOffset = sync.OnceValue(func() int64 {
	b, err := os.ReadFile("/proc/self/timens_offsets")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && (f[0] == "monotonic" || f[0] == "1") {
			sec, _ := strconv.ParseInt(f[1], 10, 64)
			nsec, _ := strconv.ParseInt(f[2], 10, 64)
			return sec*int64(time.Second) + nsec
		}
	}
	return 0
})

// Mono reads CLOCK_MONOTONIC (in the initial time namespace) in nanoseconds.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano() - monoOffset()
}

// monoAt converts a Go time (with its monotonic reading) to Mono's clock.
func monoAt(t time.Time) int64 {
	now, m := time.Now(), Mono()
	return m + int64(t.Sub(now))
}

// recorder appends a worker's operations to its history file: a line when
// an operation is called and another when it returns, each a single write,
// so a SIGKILL loses nothing already done.
type recorder struct {
	mu  sync.Mutex
	f   *os.File
	err error
}

func newRecorder(path string) (*recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return &recorder{f: f}, nil
}

func (r *recorder) write(o *Op) {
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.Write(append(b, '\n')); err != nil && r.err == nil {
		r.err = err
	}
}

func (r *recorder) close() error {
	return errors.Join(r.err, r.f.Close())
}

// loadHistories reads every worker history (*.history) in dir. The last line
// of each operation wins; an operation whose return was never written stays
// open. Operations are sorted by call time.
func loadHistories(dir string) ([]*Op, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.history"))
	if err != nil {
		return nil, err
	}
	type key struct {
		client string
		seq    int
	}
	ops := map[key]*Op{}
	for _, name := range files {
		if err := readLines(name, func(line []byte) error {
			var o Op
			if err := json.Unmarshal(line, &o); err != nil {
				return err
			}
			ops[key{o.Client, o.Seq}] = &o
			return nil
		}); err != nil {
			return nil, err
		}
	}
	out := make([]*Op, 0, len(ops))
	for _, o := range ops {
		out = append(out, o)
	}
	byCall(out)
	return out, nil
}

// byCall sorts operations by call time (then client and sequence).
func byCall(ops []*Op) {
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].Call != ops[j].Call {
			return ops[i].Call < ops[j].Call
		}
		return ops[i].Client < ops[j].Client || ops[i].Client == ops[j].Client && ops[i].Seq < ops[j].Seq
	})
}

// readLines calls fn for each complete line of the file; a torn last line
// (the process died mid-write) is ignored.
func readLines(name string, fn func([]byte) error) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	rd := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := rd.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // a line without its newline was torn by a kill
		}
		if err != nil {
			return err
		}
		if err := fn(line[:len(line)-1]); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}
