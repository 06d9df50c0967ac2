package cli_test

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/pglease/pglease/cmd/pglease/internal/cli"
)

func TestVersionLine(t *testing.T) {
	const mod = "github.com/pglease/pglease"
	rev := "0123456789abcdef0123456789abcdef01234567"
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	platform := " (go1.99.1 plan9/mips)"
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"NoBuildInfo", nil,
			"pglease (unknown) (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"},
		{"GoInstallAtVersion", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: mod, Version: "v0.3.1"},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips")},
			"pglease v0.3.1" + platform},
		{"CheckoutDirty", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: mod, Version: "(devel)"},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips", "vcs", "git", "vcs.revision", rev, "vcs.modified", "true")},
			"pglease (devel) 0123456789ab+dirty" + platform},
		{"CheckoutClean", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: mod, Version: "(devel)"},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips", "vcs.revision", rev, "vcs.modified", "false")},
			"pglease (devel) 0123456789ab" + platform},
		{"CheckoutWithoutVCS", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: mod, Version: "(devel)"},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips", "-buildvcs", "false")},
			"pglease (devel)" + platform},
		{"PseudoVersionNamesTheRevision", &debug.BuildInfo{GoVersion: "go1.99.1",
			Main:     debug.Module{Path: mod, Version: "v0.1.1-0.20250102030405-0123456789ab+dirty"},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips", "vcs.revision", rev, "vcs.modified", "true")},
			"pglease v0.1.1-0.20250102030405-0123456789ab+dirty" + platform},
		{"ShortRevision", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: mod, Version: "(devel)"},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips", "vcs.revision", "abc")},
			"pglease (devel) abc" + platform},
		{"Dependency", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "example.com/tools", Version: "v1.0.0"},
			Deps:     []*debug.Module{{Path: "github.com/jackc/pgx/v5", Version: "v5.13.0"}, {Path: mod, Version: "v0.2.0"}},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips")},
			"pglease v0.2.0" + platform},
		{"ReplacedDependency", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "example.com/tools"},
			Deps:     []*debug.Module{{Path: mod, Version: "v0.2.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.2.1"}}},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips")},
			"pglease v0.2.1" + platform},
		{"NoVersion", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "command-line-arguments"},
			Settings: settings("GOOS", "plan9", "GOARCH", "mips")},
			"pglease (unknown)" + platform},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cli.VersionLine(tc.bi); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	code, want, stderr := mainInProcess(t, "version")
	if code != 0 || stderr != "" || !strings.HasPrefix(want, "pglease ") || !strings.HasSuffix(want, runtime.GOOS+"/"+runtime.GOARCH+")\n") {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", code, want, stderr)
	}
	if _, got, _ := mainInProcess(t, "--version"); got != want {
		t.Errorf("--version printed %q, version %q", got, want)
	}
}
