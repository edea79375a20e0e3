package fsm

import (
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Hard limits. The server may set tighter ones (its TTL bounds), never looser:
// Apply refuses anything outside these, so that no entry in the log can
// corrupt the state however it got there.
const (
	MaxNameLen   = 256     // bytes, lock names and keys
	MaxOwnerLen  = 256     // bytes
	MaxValueLen  = 1 << 20 // bytes, fenced key-value values
	MinTTL       = time.Millisecond
	MaxTTL       = 24 * time.Hour
	MaxLockDelay = 10 * time.Minute
	MaxElapsed   = time.Minute // per Tick
	// MaxOncePer bounds an Acquire's once-per window (a yearly job).
	MaxOncePer = 366 * 24 * time.Hour
	// MaxPermits bounds a semaphore's permit count.
	MaxPermits = 1 << 16
	// MaxCallsInFlight bounds the answers a lease remembers: its calls not yet
	// acknowledged (see Command.Ack). A call beyond it is refused with
	// TooManyCalls and not executed.
	MaxCallsInFlight = 1024
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid")

// ValidName checks a lock name or key: 1–256 bytes of valid UTF-8 with no
// control characters.
func ValidName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalid, what, len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s has a control character (%U) at byte %d", ErrInvalid, what, r, i)
		}
	}
	return nil
}

// ValidOwner checks an owner label: at most 256 bytes of valid UTF-8 with no
// control characters; empty is allowed.
func ValidOwner(s string) error {
	if s == "" {
		return nil
	}
	return ValidName("owner", s)
}

// Validate checks the fields of c against its Kind: required fields set,
// fields of other kinds zero, sizes inside the hard limits.
func (c *Command) Validate() error {
	want := fieldsOf(c.Kind)
	if want == 0 {
		return fmt.Errorf("%w: unknown command kind %d", ErrInvalid, c.Kind)
	}
	if have := c.fields(); have&^want != 0 {
		return fmt.Errorf("%w: %s command carries fields it does not use", ErrInvalid, c.Kind)
	}
	if want&fLease != 0 && c.Lease.IsZero() {
		return fmt.Errorf("%w: %s needs a lease id", ErrInvalid, c.Kind)
	}
	if want&fRequest != 0 && c.RequestID.IsZero() {
		return fmt.Errorf("%w: %s needs a request id (16 random bytes, the same on every retry of one call)", ErrInvalid, c.Kind)
	}
	if want&fAck != 0 {
		if err := ValidCallNumbers(c.Seq, c.Ack, c.Open); err != nil {
			return fmt.Errorf("%s: %w", c.Kind, err)
		}
	} else if want&fSeq != 0 && c.Seq == 0 {
		return fmt.Errorf("%w: %s needs a call number (seq ≥ 1)", ErrInvalid, c.Kind)
	}
	if want&fToken != 0 && c.Token == 0 {
		return fmt.Errorf("%w: token 0 was never issued; tokens start at 1", ErrInvalid)
	}
	if want&fName != 0 {
		what := "lock name"
		switch c.Kind {
		case KindPut:
			what = "key"
		case KindSetNode:
			what = "node id"
		}
		if err := ValidName(what, c.Name); err != nil {
			return err
		}
	}
	switch c.Kind {
	case KindCreateLease:
		if c.TTL < MinTTL || c.TTL > MaxTTL {
			return fmt.Errorf("%w: ttl %v is outside %v…%v", ErrInvalid, c.TTL, MinTTL, MaxTTL)
		}
		if err := ValidOwner(c.Owner); err != nil {
			return err
		}
		if c.Identity != "" {
			return ValidName("identity", c.Identity)
		}
	case KindAcquire:
		if c.LockDelay < 0 || c.LockDelay > MaxLockDelay {
			return fmt.Errorf("%w: lock-delay %v is outside 0…%v", ErrInvalid, c.LockDelay, MaxLockDelay)
		}
		if c.OncePer < 0 || c.OncePer > MaxOncePer {
			return fmt.Errorf("%w: once-per window %v is outside 0…%v", ErrInvalid, c.OncePer, MaxOncePer)
		}
		if c.Permits == 1 || c.Permits > MaxPermits {
			return fmt.Errorf("%w: permits %d is outside 2…%d (a lock of one permit has none)", ErrInvalid, c.Permits, MaxPermits)
		}
		if c.Shared && c.Permits != 0 {
			return fmt.Errorf("%w: a shared (read) acquire is for a read-write lock, of one permit; this one asks for %d", ErrInvalid, c.Permits)
		}
		if c.ReleaseToken != 0 && (!c.Wait || c.OncePer != 0) {
			return fmt.Errorf("%w: a relock (release_token) waits in the queue and has no once-per window", ErrInvalid)
		}
	case KindRelease:
		if c.Ran != (c.Wall != 0) || c.Wall < 0 {
			return fmt.Errorf("%w: a release that records a run carries the leader's wall clock (after 1970), and only such a release does", ErrInvalid)
		}
	case KindPut:
		if len(c.Value) > MaxValueLen {
			return fmt.Errorf("%w: value is %d bytes, the limit is %d", ErrInvalid, len(c.Value), MaxValueLen)
		}
	case KindSetNode:
		if err := ValidName("node address", c.Addr); err != nil {
			return err
		}
	case KindTick:
		if c.Elapsed < 0 || c.Elapsed > MaxElapsed {
			return fmt.Errorf("%w: tick of %v is outside 0…%v", ErrInvalid, c.Elapsed, MaxElapsed)
		}
	}
	return nil
}

// ValidCallNumbers checks the numbering of a lease's Acquire or Release:
// seq ≥ 1; 1 ≤ ack ≤ seq; open increasing, each strictly between ack and
// seq, at most MaxCallsInFlight. The server checks requests with it too.
func ValidCallNumbers(seq, ack uint64, open []uint64) error {
	switch {
	case seq == 0:
		return fmt.Errorf("%w: seq is missing; number the Acquire and Release calls of a lease from 1, the same number on every retry of one call", ErrInvalid)
	case ack == 0:
		return fmt.Errorf("%w: ack is missing; send the lowest call number whose answer the client has not received (at most seq)", ErrInvalid)
	case ack > seq:
		return fmt.Errorf("%w: ack %d is above seq %d (a call is not answered before it is made)", ErrInvalid, ack, seq)
	}
	if len(open) > MaxCallsInFlight {
		return fmt.Errorf("%w: %d open calls listed, the limit is %d", ErrInvalid, len(open), MaxCallsInFlight)
	}
	prev := ack
	for _, o := range open {
		if o <= prev || o >= seq {
			return fmt.Errorf("%w: open call %d is not in increasing order strictly between ack %d and seq %d", ErrInvalid, o, ack, seq)
		}
		prev = o
	}
	return nil
}

// field bits, for checking which fields a kind carries.
const (
	fRequest uint32 = 1 << iota
	fLease
	fTTL
	fOwner
	fName
	fWait
	fLockDelay
	fToken
	fValue
	fRenewals
	fElapsed
	fAddr
	fSeq
	fAck
	fOpen
	fIdentity
	fOncePer
	fRan
	fWall
	fPermits
	fShared
	fReleaseToken
)

func fieldsOf(k Kind) uint32 {
	switch k {
	case KindCreateLease:
		return fRequest | fLease | fTTL | fOwner | fIdentity
	case KindRenew:
		return fLease
	case KindRevoke:
		return fRequest | fLease
	case KindExpire:
		return fLease | fRenewals
	case KindAcquire:
		return fRequest | fLease | fSeq | fAck | fOpen | fName | fWait | fLockDelay | fOncePer | fPermits | fShared | fReleaseToken
	case KindRelease:
		return fRequest | fLease | fSeq | fAck | fOpen | fName | fRan | fWall
	case KindCancelWait:
		return fLease | fSeq | fName
	case KindGrantNext:
		return fName | fToken
	case KindForceRelease:
		return fRequest | fName | fToken
	case KindPut:
		return fRequest | fName | fValue | fToken
	case KindTick:
		return fElapsed
	case KindSetNode:
		return fName | fAddr
	}
	return 0
}

// fields returns the bits of the fields that are set (non-zero).
func (c *Command) fields() uint32 {
	var f uint32
	set := func(b uint32, on bool) {
		if on {
			f |= b
		}
	}
	set(fRequest, !c.RequestID.IsZero())
	set(fLease, !c.Lease.IsZero())
	set(fTTL, c.TTL != 0)
	set(fOwner, c.Owner != "")
	set(fName, c.Name != "")
	set(fWait, c.Wait)
	set(fLockDelay, c.LockDelay != 0)
	set(fToken, c.Token != 0)
	set(fValue, len(c.Value) != 0)
	set(fRenewals, c.Renewals != 0)
	set(fElapsed, c.Elapsed != 0)
	set(fAddr, c.Addr != "")
	set(fSeq, c.Seq != 0)
	set(fAck, c.Ack != 0)
	set(fOpen, len(c.Open) != 0)
	set(fIdentity, c.Identity != "")
	set(fOncePer, c.OncePer != 0)
	set(fRan, c.Ran)
	set(fWall, c.Wall != 0)
	set(fPermits, c.Permits != 0)
	set(fShared, c.Shared)
	set(fReleaseToken, c.ReleaseToken != 0)
	return f
}
