package combination

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// oldRelease is the commit of the previous release whose agents a sequence
// with config.Old starts with: the last commit of schema version 10 (this
// version is 11). Its combination agent speaks this protocol; an old
// agent is never shut down (DoShutdown does nothing to it), as the agents
// of releases that did not report a shutdown's Close (ReplyClosed) were
// not.
const oldRelease = "9bec93e"

var oldBuild struct {
	once sync.Once
	bin  string
	took time.Duration
	err  error
}

// oldAgentBinary returns the combination test binary of oldRelease, built
// once per test process (go test -c in a tree of that commit made by git
// archive) and kept in the temporary directory, named by the commit and
// the Go version, for the runs that follow; or why it cannot be built (no
// git history: a shallow clone, or a tree that is not a checkout).
func oldAgentBinary() (string, time.Duration, error) {
	oldBuild.once.Do(func() {
		start := time.Now()
		oldBuild.bin, oldBuild.err = buildOldAgent()
		oldBuild.took = time.Since(start)
	})
	return oldBuild.bin, oldBuild.took, oldBuild.err
}

func buildOldAgent() (string, error) {
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("pglease-combination-agent-%s-%s", oldRelease, runtime.Version()))
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o100 != 0 {
		return bin, nil // built by an earlier run
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not a git checkout, so no earlier release to build (%v)", err)
	}
	root := strings.TrimSpace(string(top))
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", oldRelease+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Errorf("commit %s is not in the git history (a shallow clone? fetch the history): %v %s", oldRelease, err, out)
	}
	dir, err := os.MkdirTemp("", "pglease-combination-old-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", oldRelease)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var aerr strings.Builder
	archive.Stderr = &aerr
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s: %v: %s", oldRelease, err, aerr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "agent.test")
	build := exec.Command("go", "test", "-c", "-o", tmp, "./internal/combination")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=readonly"))
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the combination agent of %s: %v\n%s", oldRelease, err, out)
	}
	// Into place at once: another test process may be looking.
	part := fmt.Sprintf("%s.%d", bin, os.Getpid())
	if err := copyFile(tmp, part); err != nil {
		return "", err
	}
	if err := os.Rename(part, bin); err != nil {
		return "", errors.Join(err, os.Remove(part))
	}
	return bin, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// oldAgent returns the binary of an old agent; a sequence with config.Old
// runs only where it can be built (see oldAgentBinary).
func oldAgent(t *testing.T) string {
	bin, _, err := oldAgentBinary()
	if err != nil {
		t.Fatalf("an agent of release %s: %v", oldRelease, err)
	}
	return bin
}

// upgrade is DoUpgrade: agents of this version arrive in the slots the
// old agents left empty and, at once, open their clients and migrate the
// table to this version, under the old agents, which go on.
func (s *sequence) upgrade() {
	s.mu.Lock()
	if s.cfg.Old == 0 || s.h.Upgrade != 0 {
		s.mu.Unlock()
		return
	}
	s.h.Upgrade = now()
	var slots []int
	for i, a := range s.agents {
		if a == nil {
			slots = append(slots, i)
		}
	}
	s.mu.Unlock()
	for _, i := range slots {
		a := s.spawnAs(i, "")
		s.mu.Lock()
		s.agents[i] = a
		s.mu.Unlock()
	}
	s.open(slots)
}
