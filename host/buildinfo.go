package host

import (
	"runtime/debug"
	"sync"
	"time"
)

// BuildInfo says which build of the host is running.
type BuildInfo struct {
	// Version is [Version], or the module version the Go toolchain
	// stamped when [Version] was not set.
	Version string `json:"version"`
	// Commit is the VCS revision built ("" when the build had none), and
	// Modified says the tree had changes not committed.
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Date is the commit's time, not the build's: the same tree builds
	// the same binary whenever it is built (reproducible builds).
	Date time.Time `json:"date,omitzero"`
	// GoVersion is the toolchain that built it.
	GoVersion string `json:"goVersion"`
}

// Build returns the running binary's build information: the version,
// the commit and its date the toolchain stamped (go build in a git
// checkout stamps them; -buildvcs=false or a build outside one does not).
func Build() BuildInfo { return buildOnce() }

var buildOnce = sync.OnceValue(func() BuildInfo {
	b := BuildInfo{Version: Version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = bi.GoVersion
	if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Date, _ = time.Parse(time.RFC3339, s.Value)
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
})

// String is the one-line form `agenthost version` prints:
// "v1.2.3 (commit 0123abcd, 2026-12-01, go1.26.8)".
func (b BuildInfo) String() string {
	s := b.Version
	var parts []string
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if b.Modified {
			c += "+changes"
		}
		parts = append(parts, "commit "+c)
	}
	if !b.Date.IsZero() {
		parts = append(parts, b.Date.UTC().Format(time.DateOnly))
	}
	if b.GoVersion != "" {
		parts = append(parts, b.GoVersion)
	}
	if len(parts) > 0 {
		s += " ("
		for i, p := range parts {
			if i > 0 {
				s += ", "
			}
			s += p
		}
		s += ")"
	}
	return s
}
