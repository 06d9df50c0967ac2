//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
)

// readInt polls a file written by a test command until it holds a number.
func readInt(t *testing.T, path string) int {
	t.Helper()
	var n int
	waitFor(t, "a number in "+filepath.Base(path), func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		n, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return n
}

// holdLease starts a pglease run that holds name until the test ends and
// waits until its command runs.
func holdLease(t *testing.T, env []string, table, name string, extra ...string) *proc {
	t.Helper()
	mark := filepath.Join(t.TempDir(), "held")
	args := append([]string{"run", name, "--table", table}, extra...)
	args = append(args, "--", "sh", "-c", "echo $$ > "+mark+"; exec sleep 300")
	p := start(t, env, args...)
	readInt(t, mark)
	return p
}

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	noExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holdLease(t, env, table, "busy", "--owner", "same-owner")

	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"ChildsOwnStatus", []string{"run", "a", "--", "sh", "-c", "exit 3"}, 3},
		{"ChildSuccess", []string{"run", "a", "--", "true"}, 0},
		{"KilledBySignal", []string{"run", "a", "--", "sh", "-c", "kill -9 $$"}, 128 + 9},
		{"NotFound", []string{"run", "a", "--", "no-such-command-pglease"}, 127},
		{"NotExecutable", []string{"run", "a", "--", noExec}, 126},
		{"Directory", []string{"run", "a", "--", dir}, 126},
		{"HeldByAnother", []string{"run", "busy", "--", "true"}, 75},
		{"SameOwnerStillExcluded", []string{"run", "busy", "--owner", "same-owner", "--", "true"}, 75},
		{"WaitTimeoutWhileHeld", []string{"run", "busy", "--wait", "--timeout", "300ms", "--", "true"}, 75},
		{"Usage", []string{"run", "a", "--ttl", "0", "--", "true"}, 125},
		{"KillGraceBeforeFirstRenewal", []string{"run", "a", "--ttl", "10s", "--kill-grace", "4.9s", "--", "true"}, 125},
		{"ConflictExitCodeZero", []string{"run", "busy", "--conflict-exit-code", "0", "--", "sh", "-c", "exit 9"}, 0},
		{"ConflictExitCode", []string{"run", "busy", "--conflict-exit-code", "3", "--wait", "--timeout", "300ms", "--", "true"}, 3},
		{"ChildsOwnTwo", []string{"run", "a", "--", "sh", "-c", "exit 2"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{tc.args[0], tc.args[1], "--table", table}, tc.args[2:]...)
			code, stdout, stderr := run(t, env, args...)
			if code != tc.want {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.want, stdout, stderr)
			}
			switch {
			case tc.name == "ConflictExitCodeZero":
				// 0 is a skipped run's success: quiet, for cron's mail
				// and for Kubernetes (SPEC §4).
				if stdout != "" || stderr != "" {
					t.Errorf("--conflict-exit-code 0 printed stdout %q, stderr %q; want nothing", stdout, stderr)
				}
			case (tc.want == 75 || strings.HasPrefix(tc.name, "Conflict")) && !strings.Contains(stderr, "same-owner"):
				t.Errorf("stderr does not name the holder: %q", stderr)
			}
		})
	}
}

// Without --wait, run gives up on a held lease at once: it exits 75 while
// the holder, whose command runs for minutes and whose lease is renewed,
// still holds it, so it waited neither for the holder nor for the TTL.
func TestRunSkipsHeldLeaseWithoutWaiting(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	holder := holdLease(t, env, table, "nightly", "--owner", "host-a")
	tokenSQL := "SELECT token FROM " + table + " WHERE name = 'nightly'"
	held := pgtest.Value[int64](t, tokenSQL)
	p := start(t, env, "run", "nightly", "--table", table, "--", "true")
	if code := p.wait(); code != 75 {
		t.Fatalf("exit %d, want 75: %s", code, p.stderr)
	}
	select {
	case <-holder.done:
		t.Fatalf("the holder exited (%d): the lease was not held throughout", holder.code)
	default:
	}
	if tok := pgtest.Value[int64](t, tokenSQL); tok != held {
		t.Fatalf("the lease's token went from %d to %d while run was skipping it", held, tok)
	}
	t.Logf("exit 75 %s after start", p.elapsed.Round(time.Millisecond))
}

func TestRunUnreachableDatabaseIs125(t *testing.T) {
	t.Parallel()
	for _, wait := range []bool{false, true} {
		args := []string{"run", "x", "--dsn", "postgres://bob:s3cr3t-pw@127.0.0.1:1/db?connect_timeout=2", "--", "true"}
		if wait {
			args = append([]string{"run", "--wait"}, args[1:]...)
		}
		code, stdout, stderr := run(t, nil, args...)
		if code != 125 {
			t.Errorf("wait=%v: exit %d, want 125: %s", wait, code, stderr)
		}
		if strings.Contains(stdout+stderr, "s3cr3t") {
			t.Errorf("password in output: %s%s", stdout, stderr)
		}
	}
}

func TestRunChildEnvironmentAndIncreasingTokens(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	var last int64
	for i := 0; i < 3; i++ {
		code, stdout, stderr := run(t, env, "run", "tok", "--owner", "job-host-1", "--table", table, "--",
			"sh", "-c", `echo "$PGLEASE_NAME|$PGLEASE_OWNER|$PGLEASE_TOKEN"`)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		f := strings.Split(strings.TrimSpace(stdout), "|")
		if len(f) != 3 || f[0] != "tok" || f[1] != "job-host-1" {
			t.Fatalf("child saw %q", stdout)
		}
		tok, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || tok <= last {
			t.Fatalf("token %q after %d: want a greater positive integer", f[2], last)
		}
		last = tok
	}
}

func TestRunKillsWholeGroupWhenPgleaseIsKilled(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	child, grandchild := filepath.Join(dir, "child"), filepath.Join(dir, "grandchild")
	p := start(t, env, "run", "grp", "--table", table, "--", "sh", "-c",
		"sleep 300 & echo $! > "+grandchild+"; echo $$ > "+child+"; wait")
	cpid, gpid := readInt(t, child), readInt(t, grandchild)
	p.signal(syscall.SIGKILL)
	p.wait()
	killed := time.Now()
	waitFor(t, "the child and grandchild to die", func() bool { return !alive(cpid) && !alive(gpid) })
	t.Logf("group gone %s after pglease died", time.Since(killed))
}

// A force-released lease is noticed by its holder, which terminates the
// command's whole group (SIGKILL after the grace, since the command ignores
// SIGTERM) and exits 76.
func TestRunForceReleaseTerminatesCommand(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	child, grandchild := filepath.Join(dir, "child"), filepath.Join(dir, "grandchild")
	p := start(t, env, "run", "victim", "--ttl", "3s", "--kill-grace", "500ms", "--table", table, "--", "sh", "-c",
		"trap '' TERM; sleep 300 & echo $! > "+grandchild+"; echo $$ > "+child+"; wait")
	cpid, gpid := readInt(t, child), readInt(t, grandchild)

	code, stdout, stderr := run(t, env, "release", "victim", "--force", "--table", table)
	if code != 0 || !strings.Contains(stdout, "released victim") || !strings.Contains(stdout, "token") {
		t.Fatalf("release: exit %d\n%s%s", code, stdout, stderr)
	}
	released := time.Now()
	if code := p.wait(); code != 76 {
		t.Fatalf("exit %d, want 76: %s", code, p.stderr)
	}
	took := time.Since(released)
	if alive(cpid) || alive(gpid) {
		t.Fatal("the command's group outlived pglease")
	}
	// The renewal found the lease gone: the holder says so, rather than
	// running into its deadline after failing renewals.
	if !strings.Contains(p.stderr.String(), "lease victim lost") || !strings.Contains(p.stderr.String(), "SIGKILL after 500ms") {
		t.Errorf("stderr does not report the lost lease and the grace: %s", p.stderr)
	}
	t.Logf("exit 76 %s after the force-release (TTL 3s: renewal every 1s, then a 500ms grace); stderr: %s", took.Round(time.Millisecond), p.stderr)
}

func TestRunDatabaseUnreachableWhileHolding(t *testing.T) {
	t.Parallel()
	_, table := tableEnv(t)
	proxy := pgtest.NewProxy(t, pgtest.HostPort(t, pgtest.DSN(t)))
	env := []string{"PGLEASE_DSN=" + proxy.DSN(pgtest.DSN(t))}
	dir := t.TempDir()
	child, grandchild := filepath.Join(dir, "child"), filepath.Join(dir, "grandchild")
	// A 5 s TTL: the local deadline comes a second (the safety margin,
	// TTL/5) before the server-side expiry, room for a loaded machine to
	// reap the group and see pglease exit.
	p := start(t, env, "run", "cut-off", "--ttl", "5s", "--kill-grace", "400ms", "--table", table, "--", "sh", "-c",
		"trap '' TERM; sleep 300 & echo $! > "+grandchild+"; echo $$ > "+child+"; wait")
	cpid, gpid := readInt(t, child), readInt(t, grandchild)
	proxy.Blackhole(true)
	cut := time.Now()
	if code := p.wait(); code != 76 {
		t.Fatalf("exit %d, want 76: %s", code, p.stderr)
	}
	exited := p.exited
	if alive(cpid) || alive(gpid) {
		t.Fatal("the command's group outlived pglease")
	}
	// The server's expiry of the row (the database is local: same clock)
	// must come after the group was dead: nobody else could have had the
	// lease while the command ran.
	expires := pgtest.Value[time.Time](t, "SELECT expires_at FROM "+table+" WHERE name = 'cut-off'")
	if !exited.Before(expires) {
		t.Errorf("pglease exited at %s, after the server-side expiry %s", exited.Format(time.StampMicro), expires.Format(time.StampMicro))
	}
	t.Logf("exit 76 %s after the cut; %s before the server-side expiry", exited.Sub(cut), expires.Sub(exited))
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	ready, got := filepath.Join(dir, "ready"), filepath.Join(dir, "got")
	script := `for s in HUP QUIT USR1 USR2 INT; do trap "echo $s >> ` + got + `" $s; done
trap 'echo TERM >> ` + got + `; exit 7' TERM
echo $$ > ` + ready + `
while :; do sleep 0.02; done`
	p := start(t, env, "run", "sig", "--table", table, "--", "sh", "-c", script)
	readInt(t, ready)
	var want []string
	for _, s := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGHUP, "HUP"}, {syscall.SIGQUIT, "QUIT"}, {syscall.SIGUSR1, "USR1"}, {syscall.SIGUSR2, "USR2"}, {syscall.SIGINT, "INT"}} {
		p.signal(s.sig)
		want = append(want, s.name)
		waitFor(t, s.name+" to reach the command", func() bool {
			b, _ := os.ReadFile(got)
			return strings.Join(strings.Fields(string(b)), " ") == strings.Join(want, " ")
		})
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 7 {
		t.Fatalf("exit %d, want the command's 7: %s", code, p.stderr)
	}

	// A command killed by a forwarded signal: 128+signal.
	p = start(t, env, "run", "sig", "--table", table, "--", "sh", "-c", "echo $$ > "+ready+"2; exec sleep 300")
	readInt(t, ready+"2")
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 130 {
		t.Fatalf("exit %d, want 130: %s", code, p.stderr)
	}
}

func TestRunSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	holdLease(t, env, table, "queue")
	ran := filepath.Join(t.TempDir(), "ran")
	p := start(t, env, "run", "queue", "--wait", "--owner", "patient-waiter", "--table", table, "--", "touch", ran)
	// The waiter watches the holder's doorbell (a connection of its own
	// blocked on the holder's bell lock), or its session LISTENs for
	// releases: only a waiting Acquire does either.
	waitFor(t, "the waiter to wait for a release", func() bool {
		return pgtest.Value[int](t, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'pglease patient-waiter'
			AND (query LIKE 'LISTEN %' OR (wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock_shared%'))`) > 0
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 128+15 {
		t.Fatalf("exit %d, want 143: %s", code, p.stderr)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran although the wait was interrupted")
	}
}

// TestRunHandOffGap: a waiting "run --wait" starts its command only after
// the holder's command has ended, with a newer token. The gap between the
// two, which a release notification keeps short, is measured and logged.
func TestRunHandOffGap(t *testing.T) {
	env, table := tableEnv(t)
	job := []string{"--", bin, "__demo-job", "300ms"}
	type jobRun struct {
		start, end, token int64
	}
	var best time.Duration
	for round := 0; round < 3; round++ {
		name := "handoff-" + strconv.Itoa(round)
		a := start(t, env, append([]string{"run", name, "--wait", "--table", table}, job...)...)
		b := start(t, env, append([]string{"run", name, "--wait", "--table", table}, job...)...)
		var runs []jobRun
		for _, p := range []*proc{a, b} {
			if code := p.wait(); code != 0 {
				t.Fatalf("exit %d: %s", code, p.stderr)
			}
			// The job prints "start NS PID TOKEN OWNER" and "end NS".
			var r jobRun
			for _, line := range strings.Split(p.stdout.String(), "\n") {
				f := strings.Fields(line)
				switch {
				case len(f) >= 4 && f[0] == "start":
					r.start, _ = strconv.ParseInt(f[1], 10, 64)
					r.token, _ = strconv.ParseInt(f[3], 10, 64)
				case len(f) >= 2 && f[0] == "end":
					r.end, _ = strconv.ParseInt(f[1], 10, 64)
				}
			}
			if r.start == 0 || r.end == 0 || r.token == 0 {
				t.Fatalf("unexpected job output: %q", p.stdout)
			}
			runs = append(runs, r)
		}
		first, second := runs[0], runs[1]
		if second.start < first.start {
			first, second = second, first
		}
		if second.start < first.end {
			t.Fatalf("round %d: the two commands overlapped", round)
		}
		if second.token <= first.token {
			t.Errorf("round %d: the second holder's token %d is not above the first's %d", round, second.token, first.token)
		}
		gap := time.Duration(second.start - first.end)
		t.Logf("round %d: hand-off gap %s", round, gap)
		if round == 0 || gap < best {
			best = gap
		}
	}
	t.Logf("best hand-off gap %s", best)
}

// TestRunWaitTimeoutWithPersistentErrorsIs125: when every attempt fails
// (here: the role may have only one connection, so the session that a
// fast-failover lease needs cannot be opened) the wait ends at --timeout
// with exit 125, not 75: the lease was never seen held.
func TestRunWaitTimeoutWithPersistentErrorsIs125(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	role := schema + "_r"
	if len(role) > 63 {
		role = "r" + role[len(role)-62:]
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if code, _, stderr := run(t, []string{"PGLEASE_DSN=" + pgtest.DSN(t)}, "migrate", "--table", schema+".leases"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN CONNECTION LIMIT 1",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT ALL ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, pgtest.DSN(t))
		if err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE; DROP ROLE IF EXISTS "+role)
			c.Close(ctx)
		}
	})
	dsn := strings.Replace(pgtest.DSN(t), "postgres://postgres@", "postgres://"+role+"@", 1)
	p := start(t, nil, "run", "x", "--wait", "--timeout", "1s", "--fast-failover", "--dsn", dsn, "--table", schema+".leases", "--", "true")
	code := p.wait()
	if code != 125 || !strings.Contains(p.stderr.String(), "--timeout") {
		t.Fatalf("exit %d, want 125: %s", code, p.stderr)
	}
}

// pglease stepdown asks a pglease run holder to let go: its command gets
// SIGTERM, exits in its own time, pglease exits with the command's status
// and releases the lease, and a waiter takes over.
func TestStepDownStopsTheCommandGracefully(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	if code, _, stderr := run(t, env, "migrate", "--table", table); code != 0 { // stepdown creates no table
		t.Fatalf("migrate: exit %d %q", code, stderr)
	}
	if code, _, stderr := run(t, env, "stepdown", "worker", "--table", table); code != 3 || !strings.Contains(stderr, "nothing holds worker") {
		t.Fatalf("stepdown of a free name: exit %d %q", code, stderr)
	}
	mark := filepath.Join(t.TempDir(), "held")
	holder := start(t, env, "run", "worker", "--table", table, "--ttl", "1m", "--", "sh", "-c",
		"trap 'echo stopping cleanly; exit 0' TERM; echo $$ > "+mark+"; while :; do sleep 0.05; done")
	readInt(t, mark)
	waiter := start(t, env, "run", "worker", "--wait", "--table", table, "--", "sh", "-c", "echo took over")
	code, stdout, stderr := run(t, env, "stepdown", "worker", "--table", table)
	if code != 0 || !strings.Contains(stdout, "asked the holder of worker to step down") {
		t.Fatalf("stepdown: exit %d %q %q", code, stdout, stderr)
	}
	if code := holder.wait(); code != 0 || !strings.Contains(holder.stdout.String(), "stopping cleanly") ||
		!strings.Contains(holder.stderr.String(), "asked to step down") {
		t.Fatalf("the holder asked to step down: exit %d, stdout %q, stderr %q; want its command's own status 0 after SIGTERM", code, holder.stdout, holder.stderr)
	}
	// The lease was released at once: the waiter runs long before the
	// 1-minute TTL could have expired.
	if code := waiter.wait(); code != 0 || !strings.Contains(waiter.stdout.String(), "took over") {
		t.Fatalf("the waiter: exit %d, stdout %q", code, waiter.stdout)
	}
}

// A command that would run for 10 s under a run with --max-hold 2s: it gets
// SIGTERM at 1.5 s (the grace before the limit), which it ignores, SIGKILL
// at 2 s; pglease then releases the lease at once (its TTL of a minute is
// still being renewed) and exits 76, and a waiting run takes over. The
// lease is already free (or the waiter's) when the holder's pglease exits.
func TestRunMaxHoldEndsTheCommand(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	mark := filepath.Join(t.TempDir(), "held")
	holder := start(t, env, "run", "job", "--table", table, "--ttl", "1m", "--max-hold", "2s", "--kill-grace", "500ms", "--",
		"sh", "-c", "trap '' TERM; echo $$ > "+mark+"; sleep 10")
	cpid := readInt(t, mark)
	code, out, _ := run(t, env, "status", "job", "--table", table, "--json")
	if code != 0 {
		t.Fatalf("status of the held lease: exit %d", code)
	}
	var held struct{ Token int64 }
	if err := json.Unmarshal([]byte(out), &held); err != nil || held.Token == 0 {
		t.Fatalf("status --json %q: %v", out, err)
	}
	waiter := start(t, env, "run", "job", "--wait", "--table", table, "--ttl", "1m", "--", "sh", "-c", "echo took over")
	if code := holder.wait(); code != 76 {
		t.Fatalf("the holder exited %d, want 76: %s", code, holder.stderr)
	}
	if alive(cpid) {
		t.Error("the command outlived its --max-hold")
	}
	if !strings.Contains(holder.stderr.String(), "lease job reached its --max-hold of 2s") ||
		!strings.Contains(holder.stderr.String(), "SIGKILL after 500ms") {
		t.Errorf("stderr does not say why the command was ended: %s", holder.stderr)
	}
	if took := holder.elapsed; took < 2*time.Second {
		t.Errorf("the command was ended after %s, before its --max-hold of 2s", took)
	}
	code, out, _ = run(t, env, "status", "job", "--table", table, "--json")
	var now struct{ Token int64 }
	if code == 0 {
		if err := json.Unmarshal([]byte(out), &now); err != nil {
			t.Fatalf("status --json %q: %v", out, err)
		}
	}
	if now.Token == held.Token {
		t.Errorf("the lease is still held with the ended run's token %d after it exited: not released", held.Token)
	}
	if code := waiter.wait(); code != 0 || !strings.Contains(waiter.stdout.String(), "took over") {
		t.Fatalf("the waiter: exit %d, stdout %q, stderr %q", code, waiter.stdout, waiter.stderr)
	}
}
