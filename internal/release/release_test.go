// Package release_test checks that what this checkout would release can be
// installed by someone outside the repository: the module files agree on
// versions, and every module, served at its release version from a module
// proxy built from this checkout, builds for a consumer and installs with
// 'go install'. It has no code of its own.
package release_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// modulePath is the root module; nested modules are modulePath/<dir>.
const modulePath = "github.com/pglease/pglease"

// TestModuleFilesAgree checks, without building anything, what a tag relies
// on: the library's version constant, the nested modules' requirements on the root
// module and go.work's replace name one release; no go.mod has a replace or
// exclude directive ('go install pkg@version' refuses those, and users'
// builds ignore them); every go.mod and go.work says the same go version, and
// README.md states it.
func TestModuleFilesAgree(t *testing.T) {
	checkout(t)
}

// TestEveryModuleInstallsOnceTagged installs what a tag would publish, as a
// user outside the repository would: a file-based module proxy holds this
// checkout's modules at "v"+version (config.go), and with GOWORK=off in a directory
// outside the tree
//
//   - a consumer module importing pglease, pgleaseprom, pgleaseotel and
//     pgleasecron
//     builds and runs;
//   - 'go install .../cmd/pglease@vX' works and 'pglease version' says vX;
//   - 'go install .../bench@vX' builds a working bench command.
//
// Third-party modules come from the local module cache, then from the real
// GOPROXY (network) for what the cache lacks. A throwaway GOMODCACHE keeps
// the unreleased versions out of the real one; -trimpath lets later runs
// reuse the build cache. Cold, it compiles bench's dependencies (etcd, grpc,
// …): about 75 s on two cores, 6 s warm; skipped with -short.
//
// It does not prove a go.mod tidy: 'go install pkg@version' resolves an
// import that the module's go.mod misses, at its latest version.
func TestEveryModuleInstallsOnceTagged(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: builds and installs every module (skipped with -short)")
	}
	c := checkout(t)
	tag := "v" + c.version
	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	for _, m := range c.modules {
		publish(t, proxy, c.root, m, tag, c.files)
	}

	download := filepath.Join(goEnv(t, "GOMODCACHE"), "cache", "download")
	env := append(os.Environ(),
		"GOPROXY="+strings.Join([]string{
			"file://" + filepath.ToSlash(proxy),
			"file://" + filepath.ToSlash(download),
			goEnv(t, "GOPROXY"),
		}, ","),
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOFLAGS=-modcacherw", // so that t.TempDir can remove the module cache
		"GOBIN="+filepath.Join(tmp, "bin"),
		"GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GONOPROXY=", "GOINSECURE=",
		"GOWORK=off", "GOTOOLCHAIN=local",
	)
	ctx := context.Background()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-30*time.Second))
		defer cancel()
	}
	run := func(t *testing.T, dir, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 10 * time.Second
		start := time.Now()
		out, err := cmd.CombinedOutput()
		line := strings.Join(append([]string{filepath.Base(name)}, args...), " ")
		t.Logf("%s: %v", line, time.Since(start).Round(time.Millisecond))
		if ctx.Err() != nil {
			t.Fatalf("%s: out of time (a cold run compiles bench's dependencies; give go test a longer -timeout)\n%s", line, out)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		return string(out)
	}

	t.Run("ConsumerBuildsAndRuns", func(t *testing.T) {
		dir := filepath.Join(tmp, "consumer")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		gomod := fmt.Sprintf("module example.com/consumer\n\ngo %s\n\nrequire (\n\t%s %s\n\t%s/pgleaseprom %s\n\t%s/pgleasecron %s\n\t%s/pgleaseotel %s\n)\n",
			c.goVersion, modulePath, tag, modulePath, tag, modulePath, tag, modulePath, tag)
		for name, data := range map[string]string{"go.mod": gomod, "main.go": consumerMain} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		run(t, dir, goTool(t), "mod", "tidy")
		run(t, dir, goTool(t), "build", "-trimpath", "-o", "consumer", ".")
		out := run(t, dir, filepath.Join(dir, "consumer"))
		t.Logf("consumer output:\n%s", out)
		for _, want := range []string{
			"module " + modulePath + " " + tag + "\n",
			"module " + modulePath + "/pgleaseprom " + tag + "\n",
			"module " + modulePath + "/pgleasecron " + tag + "\n",
			"module " + modulePath + "/pgleaseotel " + tag + "\n",
			"next tick 2026-01-01T02:00:00Z\n",
			`DDL: CREATE TABLE IF NOT EXISTS "pglease_leases" (` + "\n",
			"metric pglease_leases_held 1\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("consumer output lacks %q", want)
			}
		}
	})

	t.Run("InstallCLI", func(t *testing.T) {
		run(t, tmp, goTool(t), "install", "-trimpath", modulePath+"/cmd/pglease@"+tag)
		for _, arg := range []string{"version", "--version"} {
			out := run(t, tmp, filepath.Join(tmp, "bin", "pglease"), arg)
			t.Logf("pglease %s: %s", arg, strings.TrimSpace(out))
			if !strings.HasPrefix(out, "pglease "+tag+" (") {
				t.Errorf("pglease %s: %q, want pglease %s (...)", arg, out, tag)
			}
		}
	})

	t.Run("InstallBench", func(t *testing.T) {
		run(t, tmp, goTool(t), "install", "-trimpath", modulePath+"/bench@"+tag)
		out := run(t, tmp, filepath.Join(tmp, "bin", "bench"), "-h") // the flag package exits 0 on -h
		if !strings.Contains(out, "-quick") {
			t.Errorf("bench -h: %q, want its usage", out)
		}
	})
}

// consumerMain uses the root module (admin.DDL, Event), pgleaseprom
// (Register, Observe), pgleaseotel (New, Observe) and pgleasecron (Parse),
// and prints the versions of our modules it was built with.
const consumerMain = `package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/pgleasecron"
	"github.com/pglease/pglease/pgleaseotel"
	"github.com/pglease/pglease/pgleaseprom"
)

func main() {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if strings.HasPrefix(m.Path, "github.com/pglease/") {
				fmt.Println("module", m.Path, m.Version)
				if m.Replace != nil {
					fmt.Println("replaced by", m.Replace.Path, m.Replace.Version)
				}
			}
		}
	}
	ddl, err := admin.DDL("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, line := range strings.Split(ddl, "\n") {
		if strings.HasPrefix(line, "CREATE TABLE") {
			fmt.Println("DDL:", line)
		}
	}
	sched, err := pgleasecron.Parse("CRON_TZ=Europe/Berlin 0 3 * * *", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("next tick", sched.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Format(time.RFC3339))
	reg := prometheus.NewRegistry()
	prom, err := pgleaseprom.Register(reg, pgleaseprom.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	otelObs, err := pgleaseotel.New(pgleaseotel.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, obs := range []pglease.Observer{prom, otelObs} {
		obs.Observe(pglease.Event{Kind: pglease.EventAcquired, Name: "nightly-report"})
	}
	families, err := reg.Gather()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, f := range families {
		if g := f.GetMetric()[0].GetGauge(); g != nil {
			fmt.Println("metric", f.GetName(), g.GetValue())
		}
	}
}
`

// module is one go.mod of the checkout.
type module struct {
	dir    string // slash-separated, relative to the root; "." for the root
	path   string
	goMod  []byte
	edit   modEdit
	tagFor string // the git tag that publishes version v: tagFor + v
}

// modEdit is the part of 'go mod edit -json' and 'go work edit -json' read
// here.
type modEdit struct {
	Module  struct{ Path string }
	Go      string
	Require []struct{ Path, Version string }
	Exclude []struct{ Path, Version string }
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
	Use []struct{ DiskPath string }
}

type checkoutInfo struct {
	root      string
	version   string // the library's version constant (config.go)
	goVersion string // the go directive every module shares
	modules   []module
	files     []string // what a commit would hold (listFiles)
}

var versionConst = regexp.MustCompile(`(?m)^const version = "([^"]+)"$`)

// checkout reads the module files of the checkout and fails the test
// unless they agree with each other and with the version constant (see
// TestModuleFilesAgree).
func checkout(t *testing.T) *checkoutInfo {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	c := &checkoutInfo{root: root}
	config, err := os.ReadFile(filepath.Join(root, "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := versionConst.FindSubmatch(config)
	if m == nil {
		t.Fatalf("config.go has no line `const version = \"...\"`")
	}
	c.version = string(m[1])
	tag := "v" + c.version

	c.files = listFiles(t, root)
	for _, f := range c.files {
		if path.Base(f) != "go.mod" {
			continue
		}
		dir := path.Dir(f)
		gomod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		mod := module{dir: dir, goMod: gomod}
		goJSON(t, &mod.edit, "mod", "edit", "-json", filepath.Join(root, filepath.FromSlash(f)))
		mod.path = mod.edit.Module.Path
		want := modulePath
		if dir != "." {
			want += "/" + dir
			mod.tagFor = dir + "/"
		}
		if mod.path != want {
			// The go command finds modulePath/dir@vX at the tag dir/vX
			// only when the module lives in dir.
			t.Errorf("%s: module %s, want %s (a nested module's path is the root's plus its directory)", f, mod.path, want)
		}
		c.modules = append(c.modules, mod)
	}
	slices.SortFunc(c.modules, func(a, b module) int { return strings.Compare(a.dir, b.dir) }) // "." first
	if len(c.modules) == 0 || c.modules[0].dir != "." {
		t.Fatalf("%s has no go.mod", root)
	}

	var work modEdit
	goJSON(t, &work, "work", "edit", "-json", filepath.Join(root, "go.work"))
	c.goVersion = c.modules[0].edit.Go
	if work.Go != c.goVersion {
		t.Errorf("go.work says go %s, go.mod says go %s", work.Go, c.goVersion)
	}
	dirs := map[string]string{} // module path => directory
	for _, mod := range c.modules {
		dirs[mod.path] = mod.dir
	}
	var used []string
	for _, u := range work.Use {
		used = append(used, path.Clean(filepath.ToSlash(u.DiskPath)))
	}
	for _, mod := range c.modules {
		f := path.Join(mod.dir, "go.mod")
		if mod.edit.Go != c.goVersion {
			t.Errorf("%s says go %s, go.mod says go %s", f, mod.edit.Go, c.goVersion)
		}
		if len(mod.edit.Replace) > 0 {
			t.Errorf("%s has a replace directive: 'go install %s/...@%s' refuses it and users' builds ignore it (local work goes in go.work)", f, mod.path, tag)
		}
		if len(mod.edit.Exclude) > 0 {
			t.Errorf("%s has an exclude directive: 'go install %s/...@%s' refuses it", f, mod.path, tag)
		}
		for _, r := range mod.edit.Require {
			if _, ours := dirs[r.Path]; ours && r.Version != tag {
				t.Errorf("%s requires %s %s, but Version in config.go is %s: bump them together", f, r.Path, r.Version, c.version)
			}
		}
		if !slices.Contains(used, mod.dir) {
			t.Errorf("go.work does not use %s", mod.dir)
		}
	}
	for _, r := range work.Replace {
		dir, ours := dirs[r.Old.Path]
		if !ours || r.Old.Version != tag || path.Clean(r.New.Path) != dir {
			t.Errorf("go.work: replace %s %s => %s %s, want only replaces of this checkout's modules at %s by their directories (%s %s => ./; Version in config.go is %s)",
				r.Old.Path, r.Old.Version, r.New.Path, r.New.Version, tag, modulePath, tag, c.version)
		}
	}
	if len(c.modules) > 1 && len(work.Replace) == 0 {
		t.Errorf("go.work lacks replace %s %s => ./: the nested modules would build against the published root module", modulePath, tag)
	}

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lang := regexp.MustCompile(`^\d+\.\d+`).FindString(c.goVersion)
	mentions := regexp.MustCompile(`\bGo (\d+\.\d+)(?:\.\d+)?`).FindAllSubmatch(readme, -1)
	if len(mentions) == 0 {
		t.Errorf("README.md does not say which Go it needs (go %s)", c.goVersion)
	}
	for _, m := range mentions {
		if string(m[1]) != lang {
			t.Errorf("README.md says %q, but the modules say go %s", m[0], c.goVersion)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return c
}

// listFiles lists the files a commit of the checkout would hold, as
// slash-separated paths relative to the root: tracked and untracked files
// that git does not ignore, as they are in the working tree. Without git, it
// lists every file outside version-control directories.
func listFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err == nil {
		for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
			// Skip what is deleted but not yet committed, and symbolic
			// links (module zips hold regular files only).
			if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err == nil && fi.Mode().IsRegular() {
				files = append(files, f)
			}
		}
		slices.Sort(files)
		return files
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && slices.Contains([]string{".git", ".hg", ".svn", ".bzr"}, d.Name()):
			return filepath.SkipDir
		case d.Type().IsRegular():
			rel, err := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// publish writes module m at version v into the file-based module proxy
// at proxy (go help goproxy): its zip holds the module's files, without
// those of modules nested in it.
func publish(t *testing.T, proxy, root string, m module, v string, files []string) {
	t.Helper()
	at := filepath.Join(proxy, filepath.FromSlash(m.path), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	var nested []string
	for _, f := range files {
		if d := path.Dir(f); path.Base(f) == "go.mod" && d != m.dir && within(d, m.dir) {
			nested = append(nested, d)
		}
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		if !within(f, m.dir) || slices.ContainsFunc(nested, func(d string) bool { return within(f, d) }) {
			continue
		}
		name := f
		if m.dir != "." {
			name = strings.TrimPrefix(f, m.dir+"/")
		}
		w, err := zw.Create(m.path + "@" + v + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"list":      []byte(v + "\n"),
		v + ".info": []byte(`{"Version":"` + v + `","Time":"2026-01-01T00:00:00Z"}`),
		v + ".mod":  m.goMod,
		v + ".zip":  buf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// within reports whether the slash-separated path p is dir or below it.
func within(p, dir string) bool {
	return dir == "." || p == dir || strings.HasPrefix(p, dir+"/")
}

// goJSON runs 'go args...' and decodes its JSON output into v.
func goJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := exec.Command(goTool(t), args...).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, exit.Stderr)
	}
	if err == nil {
		err = json.Unmarshal(out, v)
	}
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command(goTool(t), "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	return p
}
