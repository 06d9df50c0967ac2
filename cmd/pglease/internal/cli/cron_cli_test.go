package cli_test

// pglease cron and pglease jobs as a command line: input, signals, the
// lease's end, and the examples in the docs.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// pglease jobs only reads: without the jobs tables it lists no jobs and
// creates nothing; with a --table that does not exist it says so, as ls
// does, exit 1.
func TestJobsWithoutTablesListsNothing(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
	}{
		{[]string{"jobs"}, 0, "no jobs\n"},
		{[]string{"jobs", "--json"}, 0, "[]\n"},
		{[]string{"jobs", "some-job"}, 3, ""},
	} {
		code, stdout, stderr := run(t, env, append(tc.args, "--table", table)...)
		if code != tc.code || stdout != tc.stdout {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q", tc.args, code, stdout, stderr, tc.code, tc.stdout)
		}
	}
	for _, rel := range []string{table + "_jobs", table + "_runs"} {
		if pgtest.RelationExists(t, rel) {
			t.Errorf("pglease jobs created %s", rel)
		}
	}
	missing := missingSchema(t, "cli_jobs_none") + ".leases"
	if code, stdout, stderr := run(t, env, "jobs", "--table", missing); code != 1 || stdout != "" ||
		!strings.Contains(stderr, "there is no lease table "+missing) || !strings.Contains(stderr, "'pglease migrate --table "+missing+"'") {
		t.Errorf("jobs in a schema that does not exist: exit %d, stdout %q, stderr %q; want exit 1 naming the table", code, stdout, stderr)
	}
}

// Invalid files are usage errors (exit 2) naming each bad line, reported
// before anything connects: the DSN points at a listener that counts
// connections.
func TestCronInvalidFilesExit2WithoutConnecting(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	dsn := "postgres://cron:s3cret-pw@" + ln.Addr().String() + "/db?connect_timeout=2"
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name  string
		file  string   // a path, or the file's lines
		lines []string // set: write them
		msgs  []string
	}{
		{name: "InvalidExpression", lines: []string{"ok @hourly -- true", "bad 0 25 * * * -- true"},
			msgs: []string{"crontab:2: job bad: invalid schedule \"0 25 * * *\"", "1 invalid line(s); nothing was started"}},
		{name: "UnknownZoneLine", lines: []string{"CRON_TZ=Europe/Nowhere", "a @daily -- true"},
			msgs: []string{"crontab:1: unknown time zone Europe/Nowhere in CRON_TZ: use an IANA name"}},
		{name: "UnknownZoneInSchedule", lines: []string{"a CRON_TZ=Mars/Olympus 0 3 * * * -- true"},
			msgs: []string{"crontab:1: job a:", `unknown time zone "Mars/Olympus"`}},
		{name: "DuplicateNames", lines: []string{"a @hourly -- true", "# x", "a @daily -- false"},
			msgs: []string{"crontab:3: job a is defined twice (first on line 1)"}},
		{name: "NoSeparator", lines: []string{"a @hourly true"},
			msgs: []string{`crontab:1: no " -- " between the schedule and the command of job a: write NAME SCHEDULE -- COMMAND`}},
		{name: "EmptyCommand", lines: []string{"a @hourly --"},
			msgs: []string{`crontab:1: job a has no command after "--"`}},
		{name: "EveryBadLineReported", lines: []string{"a 99 * * * * -- x", "b @every -- x", "ok @hourly -- x", "c @hourly", "a @hourly -- y"},
			msgs: []string{"crontab:1: job a", "crontab:2: job b", "crontab:4: no \" -- \"", "crontab:5: job a is defined twice", "4 invalid line(s)"}},
		{name: "NoJobs", lines: []string{"# nothing", "", "CRON_TZ=UTC"},
			msgs: []string{"has no jobs: add lines of the form NAME SCHEDULE -- COMMAND"}},
		{name: "Missing", file: missing, msgs: []string{"cannot read the crontab: open " + missing + ": no such file or directory"}},
		{name: "Directory", file: dir, msgs: []string{"cannot read the crontab " + dir, "is a directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if tc.lines != nil {
				file = filepath.Join(t.TempDir(), "crontab")
				if err := os.WriteFile(file, []byte(strings.Join(tc.lines, "\n")), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			code, stdout, stderr := run(t, nil, "cron", file, "--dsn", dsn)
			if code != 2 || stdout != "" {
				t.Errorf("exit %d, stdout %q, want 2 and nothing\nstderr: %s", code, stdout, stderr)
			}
			for _, m := range tc.msgs {
				if !strings.Contains(stderr, m) {
					t.Errorf("stderr does not say %q:\n%s", m, stderr)
				}
			}
			if strings.Contains(stderr, "s3cret") {
				t.Errorf("password in stderr: %s", stderr)
			}
		})
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connection(s) to the database for invalid input", n)
	}
	// The listener does work: a valid file connects (and fails to talk).
	file := writeCrontab(t, "a @hourly -- true")
	code, _, stderr := run(t, nil, "cron", file, "--dsn", dsn)
	if code != 1 || conns.Load() == 0 || strings.Contains(stderr, "s3cret") {
		t.Errorf("valid file: exit %d, %d connection(s), stderr %q; want 1 after trying to connect", code, conns.Load(), stderr)
	}
}

// SIGTERM stops pglease cron: the running commands get it, one that
// ignores it gets SIGKILL after --kill-grace, their runs end with what
// became of them, the leases are released, and pglease cron exits 0.
func TestCronStopForwardsSignalAndWaits(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	history := newRunsTable(t, table)
	dir := t.TempDir()
	polite, stubborn, got := filepath.Join(dir, "polite"), filepath.Join(dir, "stubborn"), filepath.Join(dir, "got")
	crontab := writeCrontab(t,
		"polite @every 1s -- trap 'echo TERM >> "+got+"; exit 0' TERM; echo $$ > "+polite+"; sleep 300 & wait",
		"stubborn @every 1s -- trap '' TERM; sleep 300 & echo $! > "+stubborn+"; wait",
	)
	p := start(t, env, "cron", crontab, "--table", table, "--kill-grace", "1s")
	politePID, stubbornPID := readInt(t, polite), readInt(t, stubborn)
	p.signal(syscall.SIGTERM)
	signalled := time.Now()
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0: %s", code, p.stderr)
	}
	took := time.Since(signalled)
	if alive(politePID) || alive(stubbornPID) {
		t.Error("a command outlived pglease cron")
	}
	if b, _ := os.ReadFile(got); string(b) != "TERM\n" {
		t.Errorf("the polite command got %q, want the forwarded SIGTERM once", b)
	}
	for job, want := range map[string]string{"polite": "succeeded ", "stubborn": "failed killed by signal 9 (SIGKILL) (pglease cron was stopping)"} {
		runs := history.of(job)
		r := runs[len(runs)-1]
		e := ""
		if r.errText != nil {
			e = *r.errText
		}
		if r.status+" "+e != want {
			t.Errorf("job %s: %v, want %s", job, r, want)
		}
	}
	if held := pgtest.LeaseTable(t, pgtest.DSN(t), table).Held("cron:"); len(held) > 0 {
		t.Errorf("leases still held after the stop: %v", held)
	}
	if !strings.Contains(p.stderr.String(), "got SIGTERM; stopping") {
		t.Errorf("stderr does not report the stop: %s", p.stderr)
	}
	t.Logf("exit 0 %s after SIGTERM (kill grace 1s)", took.Round(time.Millisecond))
}

// Signals other than the stop signals are passed on to the running
// commands; a stop signal is passed on too, and a second one kills the
// commands at once, without waiting out --kill-grace.
func TestCronSecondStopSignalKillsAtOnce(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	history := newRunsTable(t, table)
	dir := t.TempDir()
	pid, got := filepath.Join(dir, "pid"), filepath.Join(dir, "got")
	crontab := writeCrontab(t, "stubborn @every 1s -- trap 'echo USR1 >> "+got+"' USR1; trap 'echo TERM >> "+got+"' TERM; echo $$ > "+pid+"; while :; do sleep 0.1; done")
	const grace = 25 * time.Second
	p := start(t, env, "cron", crontab, "--table", table, "--ttl", "60s", "--kill-grace", grace.String())
	cmd := readInt(t, pid)
	gotLines := func() string { b, _ := os.ReadFile(got); return string(b) }
	p.signal(syscall.SIGUSR1)
	waitFor(t, "the command to get SIGUSR1", func() bool { return gotLines() == "USR1\n" })
	p.signal(syscall.SIGTERM)
	waitFor(t, "the command to get SIGTERM", func() bool { return gotLines() == "USR1\nTERM\n" })
	select {
	case <-p.done:
		t.Fatalf("pglease cron exited (%d) while its command ran: %s", p.code, p.stderr)
	default:
	}
	p.signal(syscall.SIGTERM)
	again := time.Now()
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d, want 0: %s", code, p.stderr)
	}
	took := time.Since(again)
	if alive(cmd) {
		t.Error("the command outlived pglease cron")
	}
	if took >= grace {
		t.Errorf("exit %s after the second SIGTERM: the kill grace (%s) was waited out", took, grace)
	}
	runs := history.of("stubborn")
	if r := runs[0]; r.status != "failed" || r.errText == nil || *r.errText != "killed by signal 9 (SIGKILL) (pglease cron was stopping)" {
		t.Errorf("run %v, want failed, killed by SIGKILL while stopping", r)
	}
	if !strings.Contains(p.stderr.String(), "got SIGTERM again; killing 1 running command(s)") {
		t.Errorf("stderr does not report the kill: %s", p.stderr)
	}
	t.Logf("exit 0 %s after the second SIGTERM (kill grace %s)", took.Round(time.Millisecond), grace)
}

// A job's lease taken away (release --force) terminates its command's
// whole group before anyone else could take the lease; the run ends
// "lost", and pglease cron goes on. SIGKILL to pglease cron kills a
// running command's group at once.
func TestCronLostLeaseAndKilledCronEndTheCommand(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	history := newRunsTable(t, table)
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	crontab := writeCrontab(t, "victim @every 1s -- sleep 300 & echo \"$$ $!\" >> "+pids+"; wait")
	p := start(t, env, "cron", crontab, "--table", table, "--ttl", "3s", "--kill-grace", "500ms")
	groups := func() [][2]int {
		b, _ := os.ReadFile(pids)
		var out [][2]int
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var a, b int
			if n, _ := fmt.Sscanf(l, "%d %d", &a, &b); n == 2 {
				out = append(out, [2]int{a, b})
			}
		}
		return out
	}
	waitFor(t, "the command", func() bool { return len(groups()) == 1 })
	first := groups()[0]

	code, stdout, stderr := run(t, env, "release", "cron:victim", "--force", "--table", table)
	if code != 0 {
		t.Fatalf("release: exit %d: %s%s", code, stdout, stderr)
	}
	waitFor(t, "the first command's group to die", func() bool { return !alive(first[0]) && !alive(first[1]) })
	waitFor(t, "its run to end lost", func() bool { return history.of("victim")[0].status == "lost" })
	if !strings.Contains(p.stderr.String(), "lease cron:victim lost") {
		t.Errorf("stderr does not report the lost lease: %s", p.stderr)
	}
	select {
	case <-p.done:
		t.Fatalf("pglease cron exited (%d) after a lost lease: %s", p.code, p.stderr)
	default:
	}

	waitFor(t, "the command of a later tick", func() bool { return len(groups()) == 2 })
	second := groups()[1]
	p.signal(syscall.SIGKILL)
	p.wait()
	killed := time.Now()
	waitFor(t, "the second command's group to die", func() bool { return !alive(second[0]) && !alive(second[1]) })
	t.Logf("group gone %s after pglease cron was SIGKILLed", time.Since(killed).Round(time.Millisecond))
}

// cronLine is a pglease cron command line of the docs: a shell's or
// systemd's.
var cronLine = regexp.MustCompile(`^(\$ |ExecStart=)?(/usr/local/bin/)?pglease cron `)

// The crontabs of docs/CLI.md (fenced as crontab, and the ConfigMap's) and
// of 'pglease cron --help' are valid, and so are the flags of every
// pglease cron command line there.
func TestCronExamplesInDocsAreValid(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	var files [][]string    // crontabs
	var commands [][]string // pglease cron command lines, after "pglease"
	lines := strings.Split(string(b), "\n")
	fence := ""
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if fence == "" {
				fence = strings.TrimPrefix(trimmed, "```")
				if fence == "" {
					fence = "text"
				}
				if fence == "crontab" {
					files = append(files, nil)
				}
			} else {
				fence = ""
			}
			continue
		}
		where := fmt.Sprintf("CLI.md:%d", i+1)
		switch {
		case fence == "crontab":
			files[len(files)-1] = append(files[len(files)-1], line)
		case fence == "yaml" && trimmed == "crontab: |":
			indent := len(lines[i+1]) - len(strings.TrimLeft(lines[i+1], " "))
			var file []string
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], strings.Repeat(" ", indent)) {
				i++
				file = append(file, lines[i][indent:])
			}
			files = append(files, file)
		case fence == "yaml" && strings.Contains(line, `command: ["pglease", "cron"`):
			arr := trimmed[len("command: "):]
			for !strings.Contains(arr, "]") {
				i++
				arr += " " + strings.TrimSpace(lines[i])
			}
			var words []string
			if err := json.Unmarshal([]byte(arr), &words); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			commands = append(commands, words[1:])
		case fence != "" && cronLine.MatchString(trimmed):
			words := shellWords(t, where, trimmed[strings.Index(trimmed, "pglease cron "):])
			commands = append(commands, words[1:])
		}
	}
	_, help, _ := mainInProcess(t, "cron", "--help")
	example := help[strings.Index(help, "Example FILE:\n")+len("Example FILE:\n"):]
	var file []string
	for _, l := range strings.Split(example[:strings.Index(example, "\n\n")], "\n") {
		file = append(file, strings.TrimPrefix(l, "  "))
	}
	files = append(files, file)
	for _, l := range strings.Split(help, "\n") {
		if strings.HasPrefix(l, "  pglease cron ") {
			commands = append(commands, shellWords(t, "pglease cron --help", l)[1:])
		}
	}
	if len(files) < 3 || len(commands) < 5 {
		t.Fatalf("found %d crontabs and %d command lines: the extraction is broken", len(files), len(commands))
	}
	var valid string
	for i, f := range files {
		path := writeCrontab(t, f...)
		code, stdout, stderr := run(t, nil, "cron", "--check", path)
		if code != 0 || !strings.Contains(stdout, "job(s)") {
			t.Errorf("crontab %d of the docs:\n%s\nexit %d: %s%s", i+1, strings.Join(f, "\n"), code, stdout, stderr)
		}
		valid = path
	}
	for _, args := range commands {
		var checked []string
		for _, a := range args {
			switch a {
			case "/etc/pglease/crontab":
				a = valid
			case "%H", "$(POD_NAME)", "$POD_NAME":
				a = "host-a"
			}
			checked = append(checked, a)
		}
		if code, stdout, stderr := run(t, nil, append(checked, "--check")...); code != 0 {
			t.Errorf("%q with --check: exit %d: %s%s", args, code, stdout, stderr)
		}
	}
}
