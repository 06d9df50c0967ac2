//go:build unix

package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgcluster"
)

// demoEnv gives the demo a temporary directory of its own that the
// "postgres" user can traverse (the cluster runs as that user under root).
func demoEnv(t *testing.T) (env []string, tmp string) {
	t.Helper()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skip(err)
	}
	tmp = t.TempDir()
	for d := tmp; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	return []string{"TMPDIR=" + tmp}, tmp
}

// leftovers lists what the demo left in its temporary directory and the
// processes still connected to its server's port.
func leftovers(t *testing.T, tmp, port string) []string {
	t.Helper()
	var left []string
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if port != "" {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), "127.0.0.1:"+port+"/") {
				left = append(left, "process "+p)
			}
		}
	}
	return left
}

var portRE = regexp.MustCompile(`ready on 127\.0\.0\.1:(\d+)`)

func TestDemo(t *testing.T) {
	t.Parallel()
	env, tmp := demoEnv(t)
	p := start(t, env, "demo", "--hold", "400ms")
	if code := p.wait(); code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, p.stdout, p.stderr)
	}
	out := p.stdout.String()
	t.Logf("pglease demo (%s):\n%s", p.elapsed.Round(time.Millisecond), out)
	for _, want := range []string{"acquired  token", "hand-off gap", "SIGKILL worker-", "process group is gone", "failover after SIGKILL", "cleaned up"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	m := portRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no port in the demo output")
	}
	waitFor(t, "no leftovers", func() bool { return len(leftovers(t, tmp, m[1])) == 0 })
}

func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	env, tmp := demoEnv(t)
	p := start(t, env, "demo", "--hold", "5s")
	waitFor(t, "a worker to hold the lease", func() bool { return strings.Contains(p.stdout.String(), "acquired") })
	port := portRE.FindStringSubmatch(p.stdout.String())[1]
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 130 {
		t.Fatalf("interrupted demo: exit %d\n%s\n%s", code, p.stdout, p.stderr)
	}
	if !strings.Contains(p.stdout.String(), "cleaned up") {
		t.Errorf("no clean-up report:\n%s", p.stdout)
	}
	waitFor(t, "no leftovers", func() bool { return len(leftovers(t, tmp, port)) == 0 })
}

func TestDemoWithoutPostgreSQL(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, []string{"PGLEASE_PG_BIN=" + t.TempDir()}, "demo")
	if code != 1 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "install") {
		t.Fatalf("exit %d, stdout %q, stderr %q: want exit 1 and one line naming what to install", code, stdout, stderr)
	}
}
