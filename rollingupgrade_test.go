package pglease

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// earlierReleases are commits of earlier schema versions whose clients
// TestOlderReleaseDuringAnUpgrade runs beside this one: the last commit of
// schema version 7, of version 8, of version 9, of version 10 and of
// version 11.
var earlierReleases = []struct {
	rev     string
	version int
}{{"8810b4a", 7}, {"23c8c33", 8}, {"9f55155", 9}, {"9bec93e", 10}, {"2f6f0bc", 11}}

// TestOlderReleaseDuringAnUpgrade runs a client of an earlier release,
// built from git history, through a rolling upgrade: it holds leases on a
// table of its own schema version, a client of this version migrates the
// table under it, and the older client goes on. None of its statements
// may break mutual exclusion: its single acquisitions go through
// the server functions the migration replaced and follow this version's
// rules; its sets (TryAcquireAll, a statement of its own) are refused
// with an error that says to upgrade, unless its version's statements
// follow this version's rules (store.FencedBefore on: they acquire as
// before); its leases from before the upgrade renew and release as
// before.
func TestOlderReleaseDuringAnUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds earlier releases from git history (skipped with -short)")
	}
	for _, rel := range earlierReleases {
		t.Run(fmt.Sprintf("version %d", rel.version), func(t *testing.T) {
			bin := buildRelease(t, rel.rev)
			ctx := testCtx(t)
			table := pgtest.Schema(t) + ".leases"
			old := startOldClient(t, bin, table)
			leases := pgtest.LeaseTable(t, pgtest.DSN(t), table)
			// Leases of every kind it has, taken before the upgrade (the
			// first creates the table).
			old.want("try plain", "ok ")
			if v := leases.Version(); v != rel.version {
				t.Fatalf("the older client made a table of schema version %d, want %d", v, rel.version)
			}
			old.want("try fast fast", "ok ")
			old.want("try sem slots=2", "ok ")
			old.want("all set1 set2", "ok ")

			c := testClient(t, Config{Table: table, Owner: "new"})
			sh, err := c.TryAcquire(ctx, "job", WithShared()) // migrates the table
			if err != nil {
				t.Fatal(err)
			}
			if v := leases.Version(); v != store.SchemaVersion {
				t.Fatalf("the table has schema version %d after the upgrade, want %d", v, store.SchemaVersion)
			}
			fenced := rel.version < store.FencedBefore
			// An exclusive set beside a shared holder: refused, by the
			// fence or as held.
			got := old.send("all job")
			if fenced && (!strings.HasPrefix(got, "error") || !strings.Contains(got, "schema version")) {
				t.Fatalf("the older client's set beside a shared holder: %q, want an error that names the schema version", got)
			}
			if !fenced && got != "held" {
				t.Fatalf("the older client's set beside a shared holder: %q, want held", got)
			}
			if _, ok := leases.Get("job"); ok {
				t.Fatal("an exclusive row of job beside its shared holder")
			}
			// Any set: refused with the same error, and nothing written;
			// or, not fenced, granted.
			got = old.send("all free1 free2")
			if fenced && (!strings.HasPrefix(got, "error") || !strings.Contains(got, "upgrade")) {
				t.Fatalf("the older client's set of free names: %q, want an error that says to upgrade", got)
			}
			if !fenced && !strings.HasPrefix(got, "ok ") {
				t.Fatalf("the older client's set of free names: %q, want granted", got)
			}
			if held := leases.Held("free"); fenced && len(held) != 0 {
				t.Fatalf("a refused set left rows %v", held)
			}
			// Single acquisitions follow this version's rules.
			old.want("try job", "held")
			if _, err := c.TryAcquire(ctx, "sem", WithShared()); err == nil {
				t.Fatal("a shared lease of a name whose slots the older client holds")
			}
			if _, err := c.TryAcquire(ctx, "plain"); err == nil {
				t.Fatal("a lease the older client holds was granted")
			}
			// Its leases from before the upgrade live on through renewals
			// (TTL 3 s: renewed about every second).
			time.Sleep(4 * time.Second)
			for _, name := range []string{"plain", "fast", "sem", "set1"} {
				old.want("alive "+name, "yes")
			}
			old.want("release plain", "ok")
			old.want("release set1", "ok")
			if _, err := c.TryAcquire(ctx, "plain"); err != nil {
				t.Fatalf("after the older client released it: %v", err)
			}
			if err := sh.Release(ctx); err != nil {
				t.Fatal(err)
			}
			old.want("try job", "ok ")
		})
	}
}

// buildRelease builds testdata/oldclient against the tree of commit rev
// (git archive) and returns the binary.
func buildRelease(t *testing.T, rev string) string {
	t.Helper()
	if _, err := os.Stat(".git"); errors.Is(err, os.ErrNotExist) {
		if out, err := exec.Command("git", "rev-parse", "--git-dir").CombinedOutput(); err != nil {
			t.Skipf("not a git checkout, so no earlier release to build: %v: %s", err, out)
		}
	}
	dir := t.TempDir()
	archive := exec.Command("git", "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var aerr strings.Builder
	archive.Stderr = &aerr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s (the earlier release; a shallow clone lacks it: fetch the history): %v: %s", rev, err, aerr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "oldclient", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "oldclient"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oldclient", "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "oldclient.bin")
	build := exec.Command("go", "build", "-o", bin, "./oldclient")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the client of %s: %v\n%s", rev, err, out)
	}
	return bin
}

// oldClient drives a running testdata/oldclient.
type oldClient struct {
	t     *testing.T
	mu    sync.Mutex
	in    io.Writer
	lines chan string
}

func startOldClient(t *testing.T, bin, table string) *oldClient {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "OLDCLIENT_DSN="+pgtest.DSN(t), "OLDCLIENT_TABLE="+table, "OLDCLIENT_TTL=3s")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &oldClient{t: t, in: in, lines: make(chan string, 16)}
	go func() {
		defer close(o.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			o.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		_ = in.Close() // it closes its client and exits
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	if got := o.next(); got != "ready" {
		t.Fatalf("the older client did not start: %s", got)
	}
	return o
}

// send sends one command and returns its answer.
func (o *oldClient) send(cmd string) string {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := io.WriteString(o.in, cmd+"\n"); err != nil {
		o.t.Fatalf("older client: %s: %v", cmd, err)
	}
	return o.next()
}

// want sends cmd and fails the test unless the answer starts with prefix.
func (o *oldClient) want(cmd, prefix string) {
	o.t.Helper()
	if got := o.send(cmd); !strings.HasPrefix(got, prefix) {
		o.t.Fatalf("older client: %s: %q, want %q…", cmd, got, prefix)
	}
}

func (o *oldClient) next() string {
	o.t.Helper()
	select {
	case l, ok := <-o.lines:
		if !ok {
			o.t.Fatal("the older client exited")
		}
		return l
	case <-time.After(60 * time.Second):
		o.t.Fatal("the older client did not answer in 60 s")
	}
	return ""
}
