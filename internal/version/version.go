// Package version reports what a binary was built from: the module version,
// the VCS revision and the Go toolchain, read from the build information Go
// embeds (runtime/debug.ReadBuildInfo). It imports nothing of this module.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by a build with -ldflags '-X github.com/inboxhq/inbox/internal/version.version=v1.2.3
// -X github.com/inboxhq/inbox/internal/version.revision=<commit>' (make build
// does). Empty, what Go recorded is used: Go stamps the VCS revision only when
// building in a git checkout whose .git is a directory (not a git worktree)
// and -buildvcs is not false.
var version, revision string

// Info is a binary's build information.
type Info struct {
	// Version is the module version: a release tag, Go's pseudo-version
	// from the VCS (v0.0.0-<date>-<revision>[+dirty]), or "(devel)" when
	// the build recorded none (go run, go test).
	Version string
	// Revision is the VCS commit, with "-dirty" when the work tree had
	// changes, or "unknown" when the build recorded none (-buildvcs=false).
	Revision string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's build information. It never fails: a
// missing field is "unknown" or "(devel)".
func Get() Info {
	info := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "(devel)"
		}
		return info
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if revision != "" {
		return info
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && info.Revision != "unknown" {
		info.Revision += "-dirty"
	}
	return info
}

// String is the line --version prints: "name version (revision, go1.x)".
func (i Info) String(name string) string {
	return fmt.Sprintf("%s %s (revision %s, %s)", name, i.Version, i.Revision, i.GoVersion)
}
