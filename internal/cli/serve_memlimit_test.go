package cli

import (
	"bytes"
	"io/fs"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/fencehq/fence/internal/memlimit"
)

// TestServeMemoryLimit: with GOMEMLIMIT unset, serve gives the runtime 90 %
// of the cgroup's limit and logs it; with GOMEMLIMIT set it leaves the
// runtime's limit alone and logs that one.
func TestServeMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1)) // put back what the test process had
	read := func(path string) ([]byte, error) {
		switch path {
		case memlimit.CgroupV2:
			return []byte("1073741824\n"), nil // 1 GiB
		case memlimit.Meminfo:
			return []byte("MemTotal: 24684000 kB\n"), nil
		}
		return nil, fs.ErrNotExist
	}
	for _, tt := range []struct {
		name, env string
		want      int64
		log       string
	}{
		{"unset", "", 966367641, "limit_mib=921 percent=90 of=" + memlimit.CgroupV2},
		{"set", "2GiB", math.MaxInt64, "GOMEMLIMIT=2GiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			var out bytes.Buffer
			setMemoryLimit(slog.New(slog.NewTextHandler(&out, nil)), func(k string) string {
				if k == "GOMEMLIMIT" {
					return tt.env
				}
				return ""
			}, read)
			if got := debug.SetMemoryLimit(-1); got != tt.want {
				t.Errorf("runtime memory limit %d, want %d", got, tt.want)
			}
			if !strings.Contains(out.String(), tt.log) {
				t.Errorf("log %q, want it to say %q", out.String(), tt.log)
			}
		})
	}
}
