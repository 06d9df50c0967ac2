//go:build unix

package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/pgleasetest"
)

// demoEnv gives the demo a temporary directory of its own that the
// "postgres" user can traverse (the cluster runs as that user under root).
func demoEnv(t *testing.T) (env []string, tmp string) {
	t.Helper()
	if _, err := pgleasetest.FindBinaries(); err != nil {
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

var (
	demoTokenRE    = regexp.MustCompile(`(?m)^ +\+[0-9.]+s +worker-\d +acquired +token (\d+) `)
	demoTokensRE   = regexp.MustCompile(`(?m)^fencing tokens in order: ([0-9, ]+) \(`)
	demoFailoverRE = regexp.MustCompile(`(?m)^failover after SIGKILL of (.+): ([0-9.]+)ms$`)
	demoHandOffRE  = regexp.MustCompile(`(?m)^hand-off after a job ended \(release \+ notify \+ next start\): ([0-9.]+)ms$`)
	demoGoneRE     = regexp.MustCompile(`(?m)^ .* (worker-\d) +its job's whole process group is gone ([0-9.]+)ms after the kill$`)
	demoMissedRE   = regexp.MustCompile(`(?m)^MISSED: (.+)$`)
)

// TestDemo runs the demo and checks the figures it prints against what it
// promises, and that its own verdict (a MISSED line per missed figure, exit
// status 1) agrees with them.
func TestDemo(t *testing.T) {
	t.Parallel()
	env, tmp := demoEnv(t)
	p := start(t, env, "demo", "--hold", "400ms")
	code := p.wait()
	out := p.stdout.String()
	t.Logf("pglease demo (exit %d, %s):\n%s", code, p.elapsed.Round(time.Millisecond), out)
	if code != 0 && code != 1 || p.stderr.String() != "" {
		t.Fatalf("demo: exit %d, stderr %q", code, p.stderr)
	}
	for _, want := range []string{"SIGKILL worker-", "cleaned up"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}

	// The figures, as printed.
	var tokens []string
	for _, m := range demoTokenRE.FindAllStringSubmatch(out, -1) {
		tokens = append(tokens, m[1])
	}
	var failovers []string
	figures := map[string]float64{} // what → milliseconds
	for _, m := range demoFailoverRE.FindAllStringSubmatch(out, -1) {
		failovers = append(failovers, m[1])
		figures["failover after SIGKILL of "+m[1]] = millis(t, m[2])
	}
	handOffs := demoHandOffRE.FindAllStringSubmatch(out, -1)
	for i, m := range handOffs {
		figures[fmt.Sprintf("hand-off %d", i+1)] = millis(t, m[1])
	}
	for _, m := range demoGoneRE.FindAllStringSubmatch(out, -1) {
		figures[m[1]+"'s job gone after the kill"] = millis(t, m[2])
	}
	missed := demoMissedRE.FindAllStringSubmatch(out, -1)

	t.Run("Figures", func(t *testing.T) {
		if len(tokens) != 4 {
			t.Errorf("%d acquisitions in the timeline, want one per worker (4): %v", len(tokens), tokens)
		}
		for i := 1; i < len(tokens); i++ {
			if a, b := atoi(t, tokens[i-1]), atoi(t, tokens[i]); b <= a {
				t.Errorf("token %d after %d: tokens must increase", b, a)
			}
		}
		if m := demoTokensRE.FindStringSubmatch(out); m == nil || m[1] != strings.Join(tokens, ", ") {
			t.Errorf("summary of the tokens %q, the timeline has %v", m, tokens)
		}
		// The first holder is killed; the one that took over hands the
		// lease on (a release while others wait); that holder is killed.
		wantFailovers := []string{"the first holder", "a holder that got the lease in a hand-off"}
		if !slices.Equal(failovers, wantFailovers) {
			t.Errorf("failovers after SIGKILL of %q, want %q", failovers, wantFailovers)
		}
		if len(handOffs) != 1 {
			t.Errorf("%d hand-offs after a job ended, want 1", len(handOffs))
		}
		if n := strings.Count(out, "its job's whole process group is gone"); n != 2 {
			t.Errorf("%d killed holders' jobs seen gone, want 2", n)
		}
	})

	// The demo's own verdict agrees with the figures: a MISSED line for
	// each figure that misses its promise, exit 1 exactly when there is one.
	t.Run("Verdict", func(t *testing.T) {
		over := 0
		for what, v := range figures {
			if v < 1000 {
				continue
			}
			over++
			var line string
			for _, m := range missed {
				if strings.Contains(m[1], fmt.Sprintf("%.1fms", v)) {
					line = m[1]
				}
			}
			if line == "" {
				t.Errorf("%s: %.1fms, at least the promised 1s, and no MISSED line says so", what, v)
			}
		}
		if len(missed) != over {
			t.Errorf("%d MISSED lines for %d figures that miss their promise: %q", len(missed), over, missed)
		}
		if ok := strings.Contains(out, "every figure keeps what pglease promises"); ok != (len(missed) == 0) || (code == 0) != ok {
			t.Errorf("exit %d, %d MISSED lines, a line saying every figure kept its promise: %v", code, len(missed), ok)
		}
		if i := strings.Index(out, "MISSED:"); i >= 0 && i < strings.Index(out, "cleaned up") {
			t.Errorf("MISSED lines before the clean-up report: they are to end the output")
		}
	})

	// What the demo checks and the test checks again: the promises.
	t.Run("Promises", func(t *testing.T) {
		for what, v := range figures {
			if v >= 1000 {
				t.Errorf("%s: %.1fms; pglease promises under 1s", what, v)
			}
		}
		if code != 0 {
			t.Errorf("exit %d, want 0: every figure within its promise", code)
		}
	})

	m := portRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no port in the demo output")
	}
	waitFor(t, "no leftovers", func() bool { return len(leftovers(t, tmp, m[1])) == 0 })
}

func millis(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
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
