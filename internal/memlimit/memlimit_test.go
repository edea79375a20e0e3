package memlimit

import (
	"io/fs"
	"testing"
)

// files is a fake file system for Default: path → content; a missing path
// reads as fs.ErrNotExist.
type files map[string]string

func (f files) read(path string) ([]byte, error) {
	s, ok := f[path]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return []byte(s), nil
}

const meminfo = "MemTotal:       24684000 kB\nMemFree:        17409000 kB\n" // 25,276,416,000 bytes; 90 %: 22,748,774,400

func TestDefault(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files files
		want  int64
		from  string
	}{
		{"cgroup v2 limit", files{CgroupV2: "2147483648\n", Meminfo: meminfo}, 1932735283, CgroupV2}, // 90 % of 2 GiB, rounded down
		{"cgroup v2 max: the machine", files{CgroupV2: "max\n", Meminfo: meminfo}, 22748774400, Meminfo},
		{"cgroup v1 limit", files{CgroupV1: "1073741824\n", Meminfo: meminfo}, 966367641, CgroupV1},
		{"cgroup v1 unlimited: the machine", files{CgroupV1: "9223372036854771712\n", Meminfo: meminfo}, 22748774400, Meminfo},
		{"cgroup above the machine: the machine", files{CgroupV2: "99999999999999\n", Meminfo: meminfo}, 22748774400, Meminfo},
		{"v2 before v1", files{CgroupV2: "2147483648", CgroupV1: "1073741824", Meminfo: meminfo}, 1932735283, CgroupV2},
		{"cgroup limit, no meminfo", files{CgroupV2: "2147483648"}, 1932735283, CgroupV2},
		{"no cgroup: the machine", files{Meminfo: meminfo}, 22748774400, Meminfo},
		{"garbage cgroup: the machine", files{CgroupV2: "lots", Meminfo: meminfo}, 22748774400, Meminfo},
		{"garbage meminfo, no cgroup: none", files{Meminfo: "MemTotal: many\n"}, 0, ""},
		{"meminfo in MB: none", files{Meminfo: "MemTotal: 24000 MB\n"}, 0, ""},
		{"nothing readable: none", files{}, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, from := Default(tt.files.read)
			if got != tt.want || from != tt.from {
				t.Fatalf("Default = %d from %q, want %d from %q", got, from, tt.want, tt.from)
			}
		})
	}
}
