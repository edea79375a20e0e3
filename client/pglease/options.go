package pglease

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/hold"
)

// Option configures a Locker (New), one lock (Lock, TryLock, Do) or
// EnsureSchema.
type Option func(*options)

type options struct {
	ttl     time.Duration
	margin  time.Duration // 0: ttl/10
	pollMax time.Duration
	table   string
	clock   clock.Clock // lease timing: deadlines, renewals; tests inject a fake
}

// DefaultTable is the lease table's name unless WithTable says otherwise;
// the token sequence is named after it, with "_token" appended.
const DefaultTable = "fence_lease"

// MaxNameBytes is the longest lock name accepted, in bytes.
const MaxNameBytes = 1024

func defaults() options {
	return options{ttl: 30 * time.Second, pollMax: time.Second, table: DefaultTable, clock: clock.Real{}}
}

func (o *options) apply(opts []Option) {
	for _, f := range opts {
		f(o)
	}
}

// identifier is one unquoted SQL name part (as fencing accepts them).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxIdent is Postgres's NAMEDATALEN − 1: a longer name would be cut short
// silently, and two tables could end up sharing one.
const maxIdent = 63

// relations returns the quoted names of the lease table and its token
// sequence, for o.table ("name" or "schema.name").
func (o *options) relations() (table, seq string, err error) {
	parts := strings.Split(o.table, ".")
	if len(parts) > 2 {
		return "", "", fmt.Errorf("%w: table %q: at most one dot (schema.table)", ErrInvalid, o.table)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) || len(p) > maxIdent {
			return "", "", fmt.Errorf("%w: table %q: each part must match [A-Za-z_][A-Za-z0-9_]* and be at most %d bytes", ErrInvalid, o.table, maxIdent)
		}
	}
	last := parts[len(parts)-1]
	if len(last)+len(seqSuffix) > maxIdent {
		return "", "", fmt.Errorf("%w: table %q: at most %d bytes, so that its sequence %q fits Postgres's %d", ErrInvalid, o.table, maxIdent-len(seqSuffix), last+seqSuffix, maxIdent)
	}
	quote := func(ps []string) string { return `"` + strings.Join(ps, `"."`) + `"` }
	seqParts := append(parts[:len(parts)-1:len(parts)-1], last+seqSuffix)
	return quote(parts), quote(seqParts), nil
}

// seqSuffix names the token sequence after its table.
const seqSuffix = "_token"

// check validates o for a lock of name and returns the lease's safety margin.
func (o *options) check(name string) (time.Duration, error) {
	switch {
	case name == "":
		return 0, fmt.Errorf("%w: empty lock name", ErrInvalid)
	case len(name) > MaxNameBytes:
		return 0, fmt.Errorf("%w: lock name of %d bytes, more than %d", ErrInvalid, len(name), MaxNameBytes)
	case !utf8.ValidString(name) || strings.ContainsRune(name, 0):
		return 0, fmt.Errorf("%w: lock name %q is not UTF-8 text without NUL bytes (Postgres text)", ErrInvalid, name)
	case o.ttl < time.Microsecond || o.ttl%time.Microsecond != 0:
		return 0, fmt.Errorf("%w: TTL %v must be a positive whole number of microseconds (Postgres's resolution)", ErrInvalid, o.ttl)
	case o.pollMax <= 0:
		return 0, fmt.Errorf("%w: poll interval %v must be positive", ErrInvalid, o.pollMax)
	}
	if _, _, err := o.relations(); err != nil {
		return 0, err
	}
	m, err := hold.Margin(o.ttl, o.margin)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return m, nil
}

// WithTTL sets the lease TTL (default 30s; whole microseconds). The holder
// renews every TTL/3; after a crash the lock stays taken for up to one TTL,
// by the database's clock.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithSafetyMargin sets how long before the database's earliest possible
// expiry the holder stops trusting its lease (default TTL/10; never less
// than TTL × 1000 ppm + 10ms, the rule of fence's client). A margin as long
// as the TTL is refused with ErrInvalid.
func WithSafetyMargin(d time.Duration) Option { return func(o *options) { o.margin = d } }

// WithPoll sets the longest wait between two attempts of a waiting Lock
// (default 1s). Attempts start 10ms apart and double up to it, each wait
// drawn at random from its upper half (jitter, so waiters do not poll in
// step).
func WithPoll(max time.Duration) Option { return func(o *options) { o.pollMax = max } }

// WithTable names the lease table (default DefaultTable), optionally
// schema-qualified ("app.leases"); the token sequence is the same name
// with "_token" appended. Every Locker of one set of locks must use the
// same table, and EnsureSchema must have created it.
func WithTable(name string) Option { return func(o *options) { o.table = name } }
