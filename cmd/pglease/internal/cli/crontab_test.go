package cli

import (
	"strings"
	"testing"
	"time"
)

// A valid file: comments, blank lines, CRLF ends, a CRON_TZ line for the
// lines after it, a schedule with a zone of its own, options overriding
// the defaults, and commands that hold "--", "#" and quotes, kept as
// written.
func TestParseCrontabReadsJobs(t *testing.T) {
	text := strings.Join([]string{
		"# nightly things",
		"",
		"report   0 3 * * *   --   /usr/local/bin/report --full -- x # not a comment",
		"   # indented comment",
		"sweep\t@every 90s --overlap=queue --missed=all:3 -- find /tmp -name '*.tmp' -delete\r",
		`CRON_TZ="Europe/Berlin"`,
		"invoices 30 6 * * 1-5 --abandoned=retry:3 -- echo \"$PGLEASE_TICK\"",
		"tokyo CRON_TZ=Asia/Tokyo 0 9 * * * -- true",
		"CRON_TZ = UTC",
		"late 0 23 * * * -- true",
	}, "\n")
	defaults := defaultPolicies
	if err := defaults.set("missed", "skip"); err != nil {
		t.Fatal(err)
	}
	jobs, errs := parseCrontab("crontab", text, defaults)
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	want := []struct {
		line                      int
		name, sched, command      string
		policies                  string
		nextAfter2025Jan1, zoneOf string
	}{
		{3, "report", "0 3 * * *", "/usr/local/bin/report --full -- x # not a comment", "missed=skip overlap=skip abandoned=leave", "2025-01-01T03:00:00Z", "UTC"},
		{5, "sweep", "@every 90s", "find /tmp -name '*.tmp' -delete", "missed=all:3 overlap=queue abandoned=leave", "2025-01-01T00:01:30Z", "UTC"},
		{7, "invoices", "CRON_TZ=Europe/Berlin 30 6 * * 1-5", `echo "$PGLEASE_TICK"`, "missed=skip overlap=skip abandoned=retry:3", "2025-01-01T05:30:00Z", "Europe/Berlin"},
		{8, "tokyo", "CRON_TZ=Asia/Tokyo 0 9 * * *", "true", "missed=skip overlap=skip abandoned=leave", "2025-01-02T00:00:00Z", "Europe/Berlin"},
		{10, "late", "0 23 * * *", "true", "missed=skip overlap=skip abandoned=leave", "2025-01-01T23:00:00Z", "UTC"},
	}
	if len(jobs) != len(want) {
		t.Fatalf("%d jobs, want %d: %+v", len(jobs), len(want), jobs)
	}
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, w := range want {
		j := jobs[i]
		next := j.sched.Next(from).Format(time.RFC3339)
		if j.line != w.line || j.name != w.name || j.sched.String() != w.sched || j.command != w.command ||
			j.policies.String() != w.policies || next != w.nextAfter2025Jan1 || j.loc.String() != w.zoneOf {
			t.Errorf("job %d: line %d %q %q %q %q next %s zone %s\nwant line %d %q %q %q %q next %s zone %s", i,
				j.line, j.name, j.sched, j.command, j.policies, next, j.loc,
				w.line, w.name, w.sched, w.command, w.policies, w.nextAfter2025Jan1, w.zoneOf)
		}
	}
}

// Every invalid line is reported, each with its line number and a message
// that says what is wrong and what to do; the valid lines are still read.
func TestParseCrontabReportsEveryBadLine(t *testing.T) {
	lines := []struct{ text, msg string }{
		{"ok @hourly -- true", ""},
		{"range 61 * * * * -- true", `crontab:2: job range: invalid schedule "61 * * * *": end of range (61) above maximum (59)`},
		{"fields 1 2 3 -- true", "crontab:3: job fields: invalid schedule"},
		{"nosep @every 1s true", `crontab:4: no " -- " between the schedule and the command of job nosep: write NAME SCHEDULE -- COMMAND`},
		{"nocmd @every 1s --   ", `crontab:5: job nocmd has no command after "--"`},
		{"nosched -- true", "crontab:6: job nosched has no schedule: write NAME SCHEDULE -- COMMAND"},
		{"CRON_TZ=Mars/Olympus", "crontab:7: unknown time zone Mars/Olympus in CRON_TZ: use an IANA name such as Europe/Berlin or UTC"},
		{"CRON_TZ=", "crontab:8: CRON_TZ= needs a time zone"},
		{"CRON_TZ=Europe/Berlin 0 3 * * * -- x", "crontab:9: CRON_TZ=Europe/Berlin 0 3 * * * -- x: a CRON_TZ line holds one time zone and nothing else"},
		{"zone CRON_TZ=Nowhere/Else 0 3 * * * -- true", `crontab:10: job zone: schedule "CRON_TZ=Nowhere/Else 0 3 * * *": unknown time zone "Nowhere/Else": use an IANA name`},
		{"ok @daily -- again", "crontab:11: job ok is defined twice (first on line 1): give each job a name of its own"},
		{"MAILTO=ops@example.com", "crontab:12: MAILTO= lines are not supported (only CRON_TZ=ZONE)"},
		{"-x @hourly -- true", "crontab:13: a line starts with the job's NAME, not -x"},
		{"0 3 * * * /usr/bin/backup", "crontab:14: this looks like a line of a classic crontab: start it with a job NAME"},
		{"opt @hourly --missed -- true", "crontab:15: job opt: option --missed needs a value: write --missed=VALUE"},
		{"opt2 @hourly --missed=sometimes -- true", "crontab:16: job opt2: invalid --missed=sometimes: use run-once, skip or all:N"},
		{"opt3 @hourly --abandoned=retry:1 -- true", "crontab:17: job opt3: invalid --abandoned=retry:1: use leave or retry:N (N from 2 to 100)"},
		{"opt4 @hourly --frob=1 -- true", "crontab:18: job opt4: unknown option --frob: a line takes --missed=, --overlap= and --abandoned="},
		{"fast @every 500ms -- true", `crontab:19: job fast: invalid schedule "@every 500ms": the interval must be at least 1s`},
		{strings.Repeat("n", 201) + " @hourly -- true", "crontab:20: invalid job name"},
		{"nul @hourly -- a\x00b", "crontab:21: the line contains a NUL byte"},
		{"never 0 0 30 2 * -- true", "crontab:22: job never: schedule \"0 0 30 2 *\" never fires"},
		{"bad\xffname @hourly -- true", "crontab:23: invalid job name"},
		{"opt5 @hourly --missed=all:x -- true", "crontab:24: job opt5: invalid --missed=all:x"},
	}
	var text []string
	for _, l := range lines {
		text = append(text, l.text)
	}
	jobs, errs := parseCrontab("crontab", strings.Join(text, "\n"), defaultPolicies)
	if len(jobs) != 1 || jobs[0].name != "ok" {
		t.Errorf("jobs %+v, want the one valid line", jobs)
	}
	var want []string
	for _, l := range lines {
		if l.msg != "" {
			want = append(want, l.msg)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("%d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i := 0; i < len(errs) && i < len(want); i++ {
		if !strings.HasPrefix(errs[i].Error(), want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s...", i, errs[i], want[i])
		}
	}
}

func TestCronPolicyFlagsAndOptions(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"missed", "run-once"}, {"missed", "skip"}, {"missed", "all:1"}, {"missed", "all:50"},
		{"overlap", "skip"}, {"overlap", "queue"},
		{"abandoned", "leave"}, {"abandoned", "retry:2"}, {"abandoned", "retry:100"},
	} {
		p := defaultPolicies
		if err := p.set(tc.name, tc.value); err != nil || !strings.Contains(p.String(), tc.name+"="+tc.value) {
			t.Errorf("--%s=%s: %v, %s", tc.name, tc.value, err, p)
		}
		if len(p.options()) != 3 {
			t.Errorf("--%s=%s: %d library options, want 3", tc.name, tc.value, len(p.options()))
		}
	}
	for _, tc := range []struct{ name, value string }{
		{"missed", "all:0"}, {"missed", "all"}, {"missed", "all:-1"}, {"missed", "all:+2"}, {"missed", "once"},
		{"overlap", "queue:2"}, {"overlap", ""},
		{"abandoned", "retry:1"}, {"abandoned", "retry:101"}, {"abandoned", "retry"}, {"abandoned", "leave:2"},
	} {
		p := defaultPolicies
		if err := p.set(tc.name, tc.value); err == nil || !strings.Contains(err.Error(), "use ") {
			t.Errorf("--%s=%s: %v, want an error saying what to use", tc.name, tc.value, err)
		}
	}
}
