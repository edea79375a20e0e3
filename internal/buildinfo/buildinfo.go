// Package buildinfo says which fence this is: the version stamped in at
// build time (make build: -ldflags "-X .../internal/buildinfo.version=…"),
// else "dev", and the commit Go recorded from the checkout it was built in,
// else the one stamped in.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set with -ldflags "-X github.com/fencehq/fence/internal/buildinfo.version=v1.2.3".
var version = "dev"

// commit and modified are set the same way (make build, the Dockerfile)
// for builds where Go records no VCS information (-buildvcs=false, a
// source tree without .git): the commit hash, and "true" if the checkout
// had uncommitted changes. What Go recorded takes precedence.
var commit, modified string

// Info is what a binary knows of its own build.
type Info struct {
	Version   string // "dev" unless stamped in
	Revision  string // the VCS commit Go recorded, else the stamped one; "" if neither (go run, a tarball without .git)
	Modified  bool   // the checkout had uncommitted changes
	GoVersion string
	Platform  string // GOOS/GOARCH
}

// Get returns this binary's Info.
func Get() Info {
	i := Info{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if i.Revision == "" {
		i.Revision, i.Modified = commit, modified == "true"
	}
	return i
}

// String is the one line `fence version` prints.
func (i Info) String() string {
	rev := "commit unknown"
	if i.Revision != "" {
		rev = "commit " + i.Revision
		if i.Modified {
			rev += ", modified"
		}
	}
	return fmt.Sprintf("fence %s (%s, %s, %s)", i.Version, rev, i.GoVersion, i.Platform)
}
