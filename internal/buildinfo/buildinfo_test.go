package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.26.8", Platform: "linux/amd64"}, "fence v1.2.3 (commit abc123, go1.26.8, linux/amd64)"},
		{Info{Version: "dev", Revision: "abc123", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"}, "fence dev (commit abc123, modified, go1.26.8, linux/arm64)"},
		{Info{Version: "dev", GoVersion: "go1.26.8", Platform: "darwin/arm64"}, "fence dev (commit unknown, go1.26.8, darwin/arm64)"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.in, got, c.want)
		}
	}
	if i := Get(); i.Version == "" || i.GoVersion != runtime.Version() || !strings.Contains(i.Platform, "/") {
		t.Errorf("Get() = %+v", i)
	}
}

// TestStampedCommit: without VCS information from Go (test binaries have
// none, like -buildvcs=false builds), Get reports the commit stamped in.
func TestStampedCommit(t *testing.T) {
	if i := Get(); i.Revision != "" {
		t.Skipf("this binary has VCS information (%s)", i.Revision)
	}
	t.Cleanup(func() { commit, modified = "", "" })
	commit, modified = "0123abc", "true"
	if i := Get(); i.Revision != "0123abc" || !i.Modified {
		t.Errorf("Get() = %+v, want Revision 0123abc, Modified", i)
	}
	modified = ""
	if i := Get(); i.Revision != "0123abc" || i.Modified {
		t.Errorf("Get() = %+v, want Revision 0123abc, not Modified", i)
	}
}
