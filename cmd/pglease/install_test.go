package main_test

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	modulePath  = "github.com/pglease/pglease"
	fakeVersion = "v0.0.0-test" // v9.9.9 would need the module path to end in /v9
)

// TestGoInstallReportsModuleVersion installs the tool as users do,
// 'go install github.com/pglease/pglease/cmd/pglease@VERSION', from a
// file-based module proxy holding this checkout as v0.0.0-test, and checks that
// 'pglease version' reports v0.0.0-test. The dependencies come from the local
// module cache (serving as a second proxy), so it needs no network; a
// throwaway GOMODCACHE keeps the fake version out of the real one. It
// compiles the tool and its dependencies (cached by later runs): several
// seconds, skipped with -short.
func TestGoInstallReportsModuleVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: go install of the tool (skipped with -short)")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.HasPrefix(gomod, []byte("module "+modulePath+"\n")) {
		t.Fatalf("%s is not the root of %s: %v", root, modulePath, err)
	}
	out, err := exec.Command(goCmd, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	download := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")

	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	at := filepath.Join(proxy, filepath.FromSlash(modulePath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"list":                []byte(fakeVersion + "\n"),
		fakeVersion + ".info": []byte(`{"Version":"` + fakeVersion + `","Time":"2025-01-01T00:00:00Z"}`),
		fakeVersion + ".mod":  gomod,
		fakeVersion + ".zip":  moduleZip(t, root, modulePath+"@"+fakeVersion),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(tmp, "bin")
	install := exec.CommandContext(ctx, goCmd, "install", "-trimpath", modulePath+"/cmd/pglease@"+fakeVersion)
	install.Dir = tmp // outside any module
	install.Env = append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(download),
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOFLAGS=-modcacherw", // so that t.TempDir can remove the module cache
		"GOBIN="+bin,
		"GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GONOPROXY=", "GOINSECURE=",
		"GOWORK=off", "GOTOOLCHAIN=local",
	)
	start := time.Now()
	out, err = install.CombinedOutput()
	t.Logf("go install took %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		if bytes.Contains(out, []byte(filepath.ToSlash(download))) {
			t.Skipf("the local module cache lacks a dependency (run 'go mod download' once):\n%s", out)
		}
		t.Fatalf("go install: %v\n%s", err, out)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(filepath.Join(bin, "pglease"), arg).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "pglease "+fakeVersion+" (") {
			t.Errorf("pglease %s: %v: %q, want pglease %s (...)", arg, err, out, fakeVersion)
		}
	}
}

// moduleZip zips the module at root as the go command expects (go help
// goproxy): every file under prefix/, without version control directories
// and without nested modules (directories with a go.mod of their own).
func moduleZip(t *testing.T, root, prefix string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".hg", ".svn", ".bzr", "vendor":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || d.Name() == ".git" { // a worktree's .git is a file
			return nil
		}
		w, err := zw.Create(prefix + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
