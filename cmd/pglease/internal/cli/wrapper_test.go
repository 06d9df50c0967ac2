//go:build unix

package cli_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// groupJob is a command whose process group has two members, the shell
// and a grandchild, that ignore SIGTERM, so that only SIGKILL ends them.
// It writes the pids of its parent (the supervisor), itself and the
// grandchild to files in dir.
func groupJob(dir string) []string {
	return []string{"--", "sh", "-c", "trap '' TERM; sleep 300 & echo $! > " + filepath.Join(dir, "grandchild") +
		"; echo $PPID > " + filepath.Join(dir, "parent") + "; echo $$ > " + filepath.Join(dir, "child") + "; wait"}
}

type groupPids struct{ parent, child, grandchild int }

func readGroup(t *testing.T, dir string) groupPids {
	t.Helper()
	return groupPids{readInt(t, filepath.Join(dir, "parent")), readInt(t, filepath.Join(dir, "child")), readInt(t, filepath.Join(dir, "grandchild"))}
}

func (g groupPids) jobAlive() bool { return alive(g.child) || alive(g.grandchild) }

// Killing pglease's whole process group, as a shell's job control or a
// process manager's "kill the group" does, must not orphan the command:
// the helper that cleans up after pglease is out of that group's reach.
func TestRunKillingPgleasesGroupKillsTheCommand(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	// pglease leads a group of its own, as a shell job would.
	p := startWith(t, &syscall.SysProcAttr{Setpgid: true}, env, append([]string{"run", "grp-kill", "--table", table}, groupJob(dir)...)...)
	g := readGroup(t, dir)
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	p.wait()
	waitFor(t, "the command's group to die after kill -9 -PGID", func() bool { return !g.jobAlive() })
	t.Logf("command's group dead %s after kill -9 -PGID", time.Since(killed).Round(time.Millisecond))
	// The supervisor exits once it has seen the group gone.
	waitFor(t, "the supervisor to exit after its group", func() bool { return !alive(g.parent) })
}

// When the supervisor dies alone, pglease ends the command's group itself
// and releases the lease only once the group is gone, then exits 125.
func TestRunSupervisorKilledAloneNeverOrphansTheGroup(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	p := start(t, env, append([]string{"run", "sup-kill", "--ttl", "3s", "--kill-grace", "300ms", "--table", table}, groupJob(dir)...)...)
	g := readGroup(t, dir)
	if g.parent == p.cmd.Process.Pid {
		t.Fatal("the command's parent is pglease itself, not a supervisor")
	}
	if err := syscall.Kill(g.parent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	code := p.wait()
	exited := time.Now()
	if g.jobAlive() {
		t.Fatalf("pglease exited %d while the command's group lived on\nstderr: %s", code, p.stderr)
	}
	if code != 125 {
		t.Errorf("exit %d, want 125 (pglease's own failure): %s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "supervisor of the command died") {
		t.Errorf("stderr does not explain: %s", p.stderr)
	}
	// Released once the group was gone: the next run need not wait out
	// the TTL.
	if code, _, stderr := run(t, env, "run", "sup-kill", "--table", table, "--", "true"); code != 0 {
		t.Fatalf("the lease was not released: exit %d: %s", code, stderr)
	}
	t.Logf("group gone and pglease exited %s after the supervisor's SIGKILL (grace 300ms)", exited.Sub(killed).Round(time.Millisecond))
	t.Logf("stderr: %s", p.stderr)
}

// A session-bound lease lost with its session: a waiter may hold it within
// milliseconds, so the command gets SIGKILL at once, never SIGTERM and a
// grace period.
func TestRunSessionLossKillsAtOnce(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	got := filepath.Join(dir, "got")
	owner := "session-loss-" + strconv.Itoa(os.Getpid())
	// A 30s TTL: SIGTERM with the default grace (7.5s) would be recorded
	// by the trap long before SIGKILL.
	p := start(t, env, "run", "ff-loss", "--fast-failover", "--owner", owner, "--table", table, "--", "sh", "-c",
		"trap 'echo TERM >> "+got+"' TERM; echo $$ > "+filepath.Join(dir, "child")+"; while :; do sleep 0.05; done")
	child := readInt(t, filepath.Join(dir, "child"))
	if n := pgtest.TerminateBackends(t, "pglease "+owner); n == 0 {
		t.Fatal("no backend of pglease to terminate")
	}
	cut := time.Now()
	if code := p.wait(); code != 76 {
		t.Fatalf("exit %d, want 76: %s", code, p.stderr)
	}
	if alive(child) {
		t.Fatal("the command outlived pglease")
	}
	if b, err := os.ReadFile(got); err == nil {
		t.Fatalf("the command got SIGTERM (%q): a grace period after a session loss is an overlap", b)
	}
	if !strings.Contains(p.stderr.String(), "SIGKILL at once") {
		t.Errorf("stderr does not say so: %s", p.stderr)
	}
	t.Logf("exit 76 %s after the session was terminated", time.Since(cut).Round(time.Millisecond))
}

// --min-hold: a short job started by two hosts from one schedule, the
// second a little late (skewed clocks), runs once.
func TestRunMinHoldRunsAStaggeredJobOnce(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	ran := filepath.Join(t.TempDir(), "ran")
	job := []string{"--", "sh", "-c", "echo $PGLEASE_OWNER >> " + ran}
	code, _, stderr := run(t, env, append([]string{"run", "nightly", "--ttl", "1m", "--min-hold", "1m", "--owner", "host-a", "--table", table}, job...)...)
	if code != 0 {
		t.Fatalf("host-a: exit %d: %s", code, stderr)
	}
	// host-b starts after host-a's job ended: without --min-hold it would
	// run the job a second time.
	code, _, stderr = run(t, env, append([]string{"run", "nightly", "--ttl", "1m", "--min-hold", "1m", "--owner", "host-b", "--conflict-exit-code", "3", "--table", table}, job...)...)
	if code != 3 || !strings.Contains(stderr, "host-a") {
		t.Fatalf("host-b: exit %d, want the conflict code 3 naming host-a: %s", code, stderr)
	}
	b, _ := os.ReadFile(ran)
	if got := strings.Fields(string(b)); !slices.Equal(got, []string{"host-a"}) {
		t.Fatalf("the job ran on %v, want only host-a", got)
	}
	// Without --min-hold the same staggered start runs the job twice:
	// the check above is meaningful.
	code, _, stderr = run(t, env, append([]string{"run", "no-min-hold", "--owner", "host-a", "--table", table}, job...)...)
	code2, _, stderr2 := run(t, env, append([]string{"run", "no-min-hold", "--owner", "host-b", "--table", table}, job...)...)
	if code != 0 || code2 != 0 {
		t.Fatalf("without --min-hold: exit %d, %d: %s%s", code, code2, stderr, stderr2)
	}
}

// --slots N: at most N commands at once, each told its slot.
func TestRunSlots(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	var slots []string
	for i := 0; i < 2; i++ {
		mark := filepath.Join(dir, "slot"+strconv.Itoa(i))
		start(t, env, "run", "pool", "--slots", "2", "--table", table, "--", "sh", "-c",
			`echo "$PGLEASE_NAME $PGLEASE_SLOT $PGLEASE_TOKEN" > `+mark+".tmp; mv "+mark+".tmp "+mark+"; exec sleep 300")
		waitFor(t, "holder "+strconv.Itoa(i)+" to start", func() bool {
			_, err := os.Stat(mark)
			return err == nil
		})
		b, _ := os.ReadFile(mark)
		f := strings.Fields(string(b))
		if len(f) != 3 || f[0] != "pool" {
			t.Fatalf("holder %d saw %q", i, b)
		}
		if tok, err := strconv.ParseInt(f[2], 10, 64); err != nil || tok <= 0 {
			t.Fatalf("holder %d: token %q", i, f[2])
		}
		slots = append(slots, f[1])
	}
	slices.Sort(slots)
	if !slices.Equal(slots, []string{"0", "1"}) {
		t.Fatalf("slots %v, want 0 and 1", slots)
	}
	code, _, stderr := run(t, env, "run", "pool", "--slots", "2", "--table", table, "--", "true")
	if code != 75 {
		t.Fatalf("a third holder: exit %d, want 75: %s", code, stderr)
	}
	// Another N while slots are held would let more than the smaller N
	// in: refused, as pglease's own failure.
	if code, _, stderr := run(t, env, "run", "pool", "--slots", "3", "--table", table, "--", "true"); code != 125 || !strings.Contains(stderr, "held as a semaphore of 2 slots") {
		t.Fatalf("--slots 3 while 2 slots are held: exit %d, want 125: %s", code, stderr)
	}
}
