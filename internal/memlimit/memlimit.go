// Package memlimit derives the soft memory limit fence serve gives the Go
// runtime when GOMEMLIMIT is not set: 90 % of the memory the process may
// use — its cgroup's limit if one is set (a container), else the machine's
// physical memory. Near the limit the garbage collector works harder
// instead of letting the heap grow to twice the live data (GOGC's goal),
// which is what pushes a node holding a million leases past its
// container's limit while it writes a snapshot.
//
// # Caveats
//
// It is a soft limit: live data above it is not freed, only collected
// more often. GOMEMLIMIT in the environment (any value, "off" included)
// wins; Default is not consulted then.
package memlimit

import (
	"bytes"
	"fmt"
	"strconv"
)

// Percent is the share of the available memory the default limit takes:
// the rest is left for what the runtime does not count (stacks beyond the
// heap's, the binary, page cache the kernel charges to the cgroup).
const Percent = 90

// Files the limit is read from: cgroup v2, cgroup v1, the machine.
const (
	CgroupV2 = "/sys/fs/cgroup/memory.max"
	CgroupV1 = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	Meminfo  = "/proc/meminfo"
)

// Default returns Percent of the memory this process may use, reading
// files with read (os.ReadFile): the cgroup's limit if it is a number
// below the physical memory (cgroup v2's memory.max, else v1's
// limit_in_bytes; "max" and v1's huge "unlimited" value are no limit),
// else MemTotal of /proc/meminfo. from names the file the figure came
// from. limit is 0 if no file gave a figure (then no limit is set).
func Default(read func(path string) ([]byte, error)) (limit int64, from string) {
	total, err := memTotal(read)
	if err != nil {
		total = 0
	}
	for _, path := range []string{CgroupV2, CgroupV1} {
		b, err := read(path)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil || v <= 0 || total > 0 && v >= total {
			continue // "max", unreadable, or no lower than the machine
		}
		return percent(v), path
	}
	if total > 0 {
		return percent(total), Meminfo
	}
	return 0, ""
}

// percent returns Percent % of n, rounded down, without overflowing.
func percent(n int64) int64 { return n/100*Percent + n%100*Percent/100 }

// memTotal returns MemTotal of /proc/meminfo, in bytes.
func memTotal(read func(string) ([]byte, error)) (int64, error) {
	b, err := read(Meminfo)
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("MemTotal:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("%s: MemTotal line %q", Meminfo, bytes.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil || kb <= 0 {
			return 0, fmt.Errorf("%s: MemTotal %q", Meminfo, f[0])
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%s: no MemTotal", Meminfo)
}
