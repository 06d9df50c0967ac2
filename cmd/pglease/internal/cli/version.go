package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// modulePath is the module the version of the tool is the version of.
const modulePath = "github.com/pglease/pglease"

// stampedVersion and stampedCommit are what 'make release' stamps into
// its binaries (-ldflags -X), which it builds without VCS information so
// that a build is reproducible; empty in every other build, whose
// version line comes from its build info.
var stampedVersion, stampedCommit string

// versionLine formats 'pglease version' from the build info of the binary
// (nil when it has none): the module version ("v0.3.1" from
// 'go install github.com/pglease/pglease/cmd/pglease@v0.3.1', "(devel)" for
// a build in a checkout), the VCS revision and "+dirty" when the build
// recorded them, the Go version and the platform; "(unknown)" when the
// build info knows no version of the module (a binary built without
// module information). A release binary names the version and commit
// 'make release' stamped instead.
func versionLine(bi *debug.BuildInfo) string {
	version, goVersion := "", runtime.Version()
	goos, goarch := runtime.GOOS, runtime.GOARCH
	var revision, modified string
	if stampedVersion != "" {
		bi = nil // a release: its stamps are its version and commit
		version, revision = stampedVersion, stampedCommit
	}
	if bi != nil {
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		version = moduleVersion(bi)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			case "GOOS":
				goos = s.Value
			case "GOARCH":
				goarch = s.Value
			}
		}
	}
	if version == "" {
		version = "(unknown)"
	}
	line := "pglease " + version
	if revision != "" {
		revision = revision[:min(len(revision), 12)]
		if modified == "true" {
			revision += "+dirty"
		}
		// A pseudo-version (v0.0.0-20250102030405-0123456789ab) names the
		// revision already.
		if !strings.Contains(version, revision) {
			line += " " + revision
		}
	}
	return fmt.Sprintf("%s (%s %s/%s)", line, goVersion, goos, goarch)
}

// moduleVersion is the version of this module in bi: the main module's,
// or the version of the dependency when another module built the tool.
func moduleVersion(bi *debug.BuildInfo) string {
	mods := append([]*debug.Module{&bi.Main}, bi.Deps...)
	for _, m := range mods {
		if m == nil || m.Path != modulePath {
			continue
		}
		if m.Replace != nil && m.Replace.Version != "" {
			return m.Replace.Version
		}
		return m.Version
	}
	return ""
}
