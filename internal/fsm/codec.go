package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Log entry format: one raft entry holds a batch of commands, so that many
// client calls share one disk write and one consensus round.
//
//	entry   = version(1 byte = 5) count(uvarint) command*
//	command = kind(1 byte) then the kind's fields, in Command field order:
//	          RequestID, Lease: 16 bytes; Seq, Ack: uvarint; Open: uvarint count + uvarints;
//	          TTL, LockDelay, Elapsed: uvarint nanoseconds;
//	          Owner, Identity, Name, Value: uvarint length + bytes; Wait: 1 byte (0|1);
//	          Token, Renewals: uvarint; Addr: uvarint length + bytes;
//	          OncePer: uvarint nanoseconds; Ran: 1 byte (0|1); Wall: uvarint;
//	          Permits: uvarint; Shared: 1 byte (0|1); ReleaseToken: uvarint.
//
// Decoding is strict: unknown versions or kinds, truncation, trailing bytes,
// non-canonical booleans and invalid fields are errors, so that
// Decode(Encode(cmds)) == cmds and garbage never reaches Apply.
//
// An entry is written in the oldest version that can express it, so that a
// cluster that does not use a newer feature writes nothing an older fence
// cannot read (and a version that says more than its commands need is
// refused as non-canonical):
//   - version 2: neither identities nor once-per fields;
//   - version 3: version 2 plus Identity (CreateLease), for an entry with
//     an identity and no once-per field;
//   - version 4: version 3 plus OncePer (Acquire) and Ran, Wall (Release),
//     for an entry with an Acquire with a once-per window or a Release
//     that records a run;
//   - version 5: version 4 plus Permits and Shared (Acquire), for an entry
//     with an Acquire of a semaphore or a shared Acquire;
//   - version 6: version 5 plus ReleaseToken (Acquire), for an entry with a
//     relock.
//
// Version 1 (fence before call numbers) is refused with ErrOldFormat: its
// commands would mean something else under today's rules.
const (
	entryVersion       = 6
	oldestEntryVersion = 2
)

// versionOf returns the oldest entry version that can express cmds.
func versionOf(cmds []Command) byte {
	version := byte(oldestEntryVersion)
	for i := range cmds {
		switch c := &cmds[i]; {
		case c.ReleaseToken != 0:
			return 6
		case c.Permits != 0 || c.Shared:
			version = max(version, 5)
		case c.OncePer != 0 || c.Ran:
			version = max(version, 4)
		case c.Identity != "":
			version = max(version, 3)
		}
	}
	return version
}

// ErrOldFormat is wrapped by the errors for log entries and snapshots
// written by an earlier fence in a format this one does not read.
var ErrOldFormat = errors.New("written by an earlier fence in a format this version does not read")

// maxBatch bounds the commands one entry may claim, so a corrupt count cannot
// make the decoder allocate without bound.
const maxBatch = 1 << 20

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt entry")

// EncodeBatch appends the entry for cmds to dst. Commands must be valid.
func EncodeBatch(dst []byte, cmds []Command) []byte {
	version := versionOf(cmds)
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, uint64(len(cmds)))
	for i := range cmds {
		dst = appendCommand(dst, &cmds[i], version)
	}
	return dst
}

// DecodeBatch parses an entry made by EncodeBatch and validates every command.
func DecodeBatch(b []byte) ([]Command, error) {
	d := decoder{b: b}
	d.version = d.byte()
	if v := d.version; d.err == nil && (v < oldestEntryVersion || v > entryVersion) {
		if v < oldestEntryVersion {
			return nil, fmt.Errorf("%w: log entry format %d (this fence reads %d…%d)", ErrOldFormat, v, oldestEntryVersion, entryVersion)
		}
		return nil, fmt.Errorf("%w: version %d, want %d…%d", ErrCorrupt, v, oldestEntryVersion, entryVersion)
	}
	n := d.uvarint()
	if d.err == nil && (n > maxBatch || n > uint64(len(d.b))) { // every command takes ≥ 1 byte
		return nil, fmt.Errorf("%w: batch claims %d commands in %d bytes", ErrCorrupt, n, len(d.b))
	}
	cmds := make([]Command, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var c Command
		d.command(&c)
		if d.err == nil {
			if err := c.Validate(); err != nil {
				return nil, fmt.Errorf("%w: command %d: %v", ErrCorrupt, i, err)
			}
		}
		cmds = append(cmds, c)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	if v := versionOf(cmds); d.err == nil && d.version != v {
		d.err = fmt.Errorf("%w: a version-%d entry whose commands version %d expresses (an entry is written in the oldest version that can)", ErrCorrupt, d.version, v)
	}
	if d.err != nil {
		return nil, d.err
	}
	return cmds, nil
}

func appendCommand(dst []byte, c *Command, version byte) []byte {
	f := fieldsOf(c.Kind)
	dst = append(dst, byte(c.Kind))
	if f&fRequest != 0 {
		dst = append(dst, c.RequestID[:]...)
	}
	if f&fLease != 0 {
		dst = append(dst, c.Lease[:]...)
	}
	if f&fSeq != 0 {
		dst = binary.AppendUvarint(dst, c.Seq)
	}
	if f&fAck != 0 {
		dst = binary.AppendUvarint(dst, c.Ack)
	}
	if f&fOpen != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(c.Open)))
		for _, o := range c.Open {
			dst = binary.AppendUvarint(dst, o)
		}
	}
	if f&fTTL != 0 {
		dst = binary.AppendUvarint(dst, uint64(c.TTL))
	}
	if f&fOwner != 0 {
		dst = appendString(dst, c.Owner)
	}
	if f&fIdentity != 0 && version >= 3 {
		dst = appendString(dst, c.Identity)
	}
	if f&fName != 0 {
		dst = appendString(dst, c.Name)
	}
	if f&fWait != 0 {
		dst = appendBool(dst, c.Wait)
	}
	if f&fLockDelay != 0 {
		dst = binary.AppendUvarint(dst, uint64(c.LockDelay))
	}
	if f&fToken != 0 {
		dst = binary.AppendUvarint(dst, c.Token)
	}
	if f&fValue != 0 {
		dst = appendString(dst, string(c.Value))
	}
	if f&fRenewals != 0 {
		dst = binary.AppendUvarint(dst, c.Renewals)
	}
	if f&fElapsed != 0 {
		dst = binary.AppendUvarint(dst, uint64(c.Elapsed))
	}
	if f&fAddr != 0 {
		dst = appendString(dst, c.Addr)
	}
	if f&fOncePer != 0 && version >= 4 {
		dst = binary.AppendUvarint(dst, uint64(c.OncePer))
	}
	if f&fRan != 0 && version >= 4 {
		dst = appendBool(dst, c.Ran)
	}
	if f&fWall != 0 && version >= 4 {
		dst = binary.AppendUvarint(dst, uint64(c.Wall))
	}
	if f&fPermits != 0 && version >= 5 {
		dst = binary.AppendUvarint(dst, uint64(c.Permits))
	}
	if f&fShared != 0 && version >= 5 {
		dst = appendBool(dst, c.Shared)
	}
	if f&fReleaseToken != 0 && version >= 6 {
		dst = binary.AppendUvarint(dst, c.ReleaseToken)
	}
	return dst
}

func (d *decoder) command(c *Command) {
	c.Kind = Kind(d.byte())
	f := fieldsOf(c.Kind)
	if d.err == nil && f == 0 {
		d.err = fmt.Errorf("%w: unknown command kind %d", ErrCorrupt, c.Kind)
		return
	}
	if f&fRequest != 0 {
		d.fixed(c.RequestID[:])
	}
	if f&fLease != 0 {
		d.fixed(c.Lease[:])
	}
	if f&fSeq != 0 {
		c.Seq = d.uvarint()
	}
	if f&fAck != 0 {
		c.Ack = d.uvarint()
	}
	if f&fOpen != 0 {
		if n := d.count(); n > MaxCallsInFlight {
			d.fail("%d open calls, limit %d", n, MaxCallsInFlight)
		} else if n > 0 {
			c.Open = make([]uint64, n)
			for i := range c.Open {
				c.Open[i] = d.uvarint()
			}
		}
	}
	if f&fTTL != 0 {
		c.TTL = d.duration()
	}
	if f&fOwner != 0 {
		c.Owner = d.string(MaxOwnerLen)
	}
	if f&fIdentity != 0 && d.version >= 3 {
		c.Identity = d.string(MaxNameLen)
	}
	if f&fName != 0 {
		c.Name = d.string(MaxNameLen)
	}
	if f&fWait != 0 {
		c.Wait = d.bool()
	}
	if f&fLockDelay != 0 {
		c.LockDelay = d.duration()
	}
	if f&fToken != 0 {
		c.Token = d.uvarint()
	}
	if f&fValue != 0 {
		if v := d.string(MaxValueLen); v != "" {
			c.Value = []byte(v)
		}
	}
	if f&fRenewals != 0 {
		c.Renewals = d.uvarint()
	}
	if f&fElapsed != 0 {
		c.Elapsed = d.duration()
	}
	if f&fAddr != 0 {
		c.Addr = d.string(MaxNameLen)
	}
	if f&fOncePer != 0 && d.version >= 4 {
		c.OncePer = d.duration()
	}
	if f&fRan != 0 && d.version >= 4 {
		c.Ran = d.bool()
	}
	if f&fWall != 0 && d.version >= 4 {
		if w := d.uvarint(); w > 1<<63-1 {
			d.fail("wall clock out of range")
		} else {
			c.Wall = int64(w)
		}
	}
	if f&fPermits != 0 && d.version >= 5 {
		if p := d.uvarint(); p > MaxPermits {
			d.fail("permits %d above %d", p, MaxPermits)
		} else {
			c.Permits = uint32(p)
		}
	}
	if f&fShared != 0 && d.version >= 5 {
		c.Shared = d.bool()
	}
	if f&fReleaseToken != 0 && d.version >= 6 {
		c.ReleaseToken = d.uvarint()
	}
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// decoder reads from b; the first error sticks and later reads return zero.
type decoder struct {
	b       []byte
	err     error
	version byte // of the entry or snapshot being decoded
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bool() bool {
	switch v := d.byte(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("boolean byte %d", v)
		return false
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	if n != len(binary.AppendUvarint(nil, v)) {
		d.fail("non-canonical varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) duration() time.Duration {
	v := d.uvarint()
	if v > 1<<62 {
		d.fail("duration out of range")
		return 0
	}
	return time.Duration(v)
}

func (d *decoder) fixed(dst []byte) {
	if d.err != nil {
		return
	}
	if len(d.b) < len(dst) {
		d.fail("truncated")
		return
	}
	copy(dst, d.b)
	d.b = d.b[len(dst):]
}

func (d *decoder) string(max int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail("string of %d bytes (limit %d, %d left)", n, max, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
