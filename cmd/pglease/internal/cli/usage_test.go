package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pglease/pglease/cmd/pglease/internal/cli"
)

// main runs cli.Main in-process.
func mainInProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// badRunInputs are invalid command lines of pglease run, each with a piece
// of the message that must explain it.
var badRunInputs = []struct {
	name string
	args []string
	msg  string
}{
	{"NoArgs", []string{"run"}, "missing lease NAME"},
	{"EmptyName", []string{"run", "", "--", "true"}, "name is empty"},
	{"LongName", []string{"run", strings.Repeat("n", 300), "--", "true"}, "300 bytes"},
	{"InvalidUTF8Name", []string{"run", "a\xffb", "--", "true"}, "UTF-8"},
	{"NameStartsWithDash", []string{"run", "--", "-x"}, "missing lease NAME"},
	{"DashName", []string{"run", "-x", "--", "true"}, "unknown flag -x"},
	{"TwoNames", []string{"run", "a", "b", "--", "true"}, "put the command after --"},
	{"NoCommand", []string{"run", "a"}, "missing COMMAND"},
	{"EmptyCommand", []string{"run", "a", "--"}, "missing COMMAND"},
	{"TTLZero", []string{"run", "a", "--ttl", "0", "--", "true"}, "--ttl"},
	{"TTLNegative", []string{"run", "a", "--ttl", "-1s", "--", "true"}, "--ttl"},
	{"TTLWord", []string{"run", "a", "--ttl", "abc", "--", "true"}, "not a duration"},
	{"TTLTooShort", []string{"run", "a", "--ttl", "500ms", "--", "true"}, "at least 1s"},
	{"TTLMissingValue", []string{"run", "a", "--ttl"}, "needs a value"},
	{"TableHostile", []string{"run", "a", "--table", "x; DROP TABLE users", "--", "true"}, "--table"},
	{"TableQuoted", []string{"run", "a", "--table", `"Leases"`, "--", "true"}, "--table"},
	{"TableMixedCase", []string{"run", "a", "--table", "Leases", "--", "true"}, "--table"},
	{"SchemaMixedCase", []string{"run", "a", "--table", "Ops.leases", "--", "true"}, "--table"},
	{"TableThreeParts", []string{"run", "a", "--table", "a.b.c", "--", "true"}, "--table"},
	{"TableTooLong", []string{"run", "a", "--table", strings.Repeat("t", 64), "--", "true"}, "--table"},
	{"TimeoutWithoutWait", []string{"run", "a", "--timeout", "5s", "--", "true"}, "--timeout needs --wait"},
	{"TimeoutZero", []string{"run", "a", "--wait", "--timeout", "0", "--", "true"}, "--timeout"},
	{"TimeoutNegative", []string{"run", "a", "--wait", "--timeout", "-1s", "--", "true"}, "--timeout"},
	{"KillGraceZero", []string{"run", "a", "--kill-grace", "0s", "--", "true"}, "--kill-grace"},
	{"KillGraceHalfTTL", []string{"run", "a", "--ttl", "10s", "--kill-grace", "5s", "--", "true"}, "a healthy command would be killed"},
	{"KillGraceBeforeFirstRenewal", []string{"run", "a", "--ttl", "10s", "--kill-grace", "4.9s", "--", "true"}, "use at most 3.666s"},
	{"KillGraceNegative", []string{"run", "a", "--kill-grace", "-1s", "--", "true"}, "positive"},
	{"MinHoldAboveTTL", []string{"run", "a", "--ttl", "10s", "--min-hold", "11s", "--", "true"}, "exceeds the TTL"},
	{"MinHoldNegative", []string{"run", "a", "--min-hold", "-1s", "--", "true"}, "--min-hold"},
	{"MinHoldWord", []string{"run", "a", "--min-hold", "soon", "--", "true"}, "not a duration"},
	{"MaxHoldShort", []string{"run", "a", "--max-hold", "500ms", "--", "true"}, "maximum hold must be between 1s"},
	{"MaxHoldBelowMinHold", []string{"run", "a", "--min-hold", "5s", "--max-hold", "2s", "--", "true"}, "exceeds the maximum hold"},
	{"MaxHoldWithinGrace", []string{"run", "a", "--max-hold", "2s", "--kill-grace", "3s", "--", "true"}, "longer than that"},
	{"SlotsZero", []string{"run", "a", "--slots", "0", "--", "true"}, "slots must be between 1 and 1000"},
	{"SlotsTooMany", []string{"run", "a", "--slots", "1001", "--", "true"}, "slots must be between 1 and 1000"},
	{"SlotsWord", []string{"run", "a", "--slots", "two", "--", "true"}, "not a whole number"},
	{"SlotsNameTooLong", []string{"run", strings.Repeat("n", 254), "--slots", "10", "--", "true"}, "slot names are up to 256 bytes"},
	{"ConflictCodeNegative", []string{"run", "a", "--conflict-exit-code", "-1", "--", "true"}, "0 to 255"},
	{"ConflictCode256", []string{"run", "a", "--conflict-exit-code", "256", "--", "true"}, "0 to 255"},
	{"OwnerTooLong", []string{"run", "a", "--owner", strings.Repeat("o", 256), "--", "true"}, "256 bytes, the maximum is 255"},
	{"OwnerInvalidUTF8", []string{"run", "a", "--owner", "a\xffb", "--", "true"}, "UTF-8"},
	{"UnknownFlag", []string{"run", "a", "--frobnicate", "--", "true"}, "unknown flag"},
	{"BoolWithValue", []string{"run", "a", "--wait=maybe", "--", "true"}, "--wait"},
	{"OwnerEmpty", []string{"run", "a", "--owner", "", "--", "true"}, "--owner"},
	{"OwnerControl", []string{"run", "a", "--owner", "a\nb", "--", "true"}, "control character"},
	{"MalformedDSN", []string{"run", "a", "--dsn", "postgres://u:hunter2@host:notaport/db", "--", "true"}, "invalid connection string"},
	{"MalformedKeywordDSN", []string{"run", "a", "--dsn", "host=x password=hunter2 port=abc", "--", "true"}, "invalid connection string"},
}

func TestUsageErrorsInProcess(t *testing.T) {
	t.Setenv("PGLEASE_DSN", "postgres://nobody@127.0.0.1:1/none") // never reached
	cases := append(badRunInputs, []struct {
		name string
		args []string
		msg  string
	}{
		{"NoCommandAtAll", nil, "Usage"},
		{"UnknownCommand", []string{"frob"}, "unknown command"},
		{"StatusNoName", []string{"status"}, "expected one lease NAME"},
		{"StatusBadName", []string{"status", ""}, "name is empty"},
		{"ReleaseWithoutForce", []string{"release", "a"}, "--force"},
		{"ReleaseDashName", []string{"release", "--force", "--", "-a"}, "must not start with '-'"},
		{"LsExtraArg", []string{"ls", "x"}, "unexpected argument"},
		{"LsBadTable", []string{"ls", "--table", "bad-name"}, "--table"},
		{"SchemaBadTable", []string{"schema", "--table", "Bad"}, "--table"},
		{"MigrateBadDSN", []string{"migrate", "--dsn", "postgres://:99999999/"}, "invalid connection string"},
		{"CleanupExtra", []string{"cleanup", "now"}, "unexpected argument"},
		{"CompletionNoShell", []string{"completion"}, "bash, zsh or fish"},
		{"CompletionUnknownShell", []string{"completion", "powershell"}, "use bash, zsh or fish"},
		{"HelpUnknownCommand", []string{"help", "frob"}, "unknown command frob"},
		{"HelpHiddenCommand", []string{"help", "__supervise"}, "unknown command"},
		{"DemoWorkers", []string{"demo", "--workers", "1"}, "--workers"},
		{"DemoThreeWorkers", []string{"demo", "--workers", "3"}, "a number from 4 to 9"},
		{"VersionExtraArg", []string{"version", "now"}, "unexpected argument now"},
		{"VersionExtraArgAfterDashDash", []string{"version", "--", "x"}, "unexpected argument x"},
		{"DashDashVersionExtraArg", []string{"--version", "x"}, "unexpected argument x"},
		{"VersionUnknownFlag", []string{"version", "--short"}, "unknown flag --short"},
		{"CompletionExtraAfterDashDash", []string{"completion", "bash", "--", "zsh"}, "needs one shell"},
		{"HelpExtraAfterDashDash", []string{"help", "run", "--", "ls"}, "help takes one COMMAND, got 2"},
		{"CronNoFile", []string{"cron"}, "missing FILE"},
		{"CronTwoFiles", []string{"cron", "a", "b"}, "expected one FILE, got 2"},
		{"CronBadMissed", []string{"cron", "f", "--missed", "sometimes"}, "invalid --missed=sometimes: use run-once, skip or all:N"},
		{"CronBadOverlap", []string{"cron", "f", "--overlap=wait"}, "invalid --overlap=wait: use skip or queue"},
		{"CronBadAbandoned", []string{"cron", "f", "--abandoned", "retry:1"}, "use leave or retry:N (N from 2 to 100)"},
		{"CronTTLZero", []string{"cron", "f", "--ttl", "0"}, "--ttl"},
		{"CronKillGraceHalfTTL", []string{"cron", "f", "--ttl", "10s", "--kill-grace", "5s"}, "a healthy command would be killed"},
		{"CronOwnerControl", []string{"cron", "f", "--owner", "a\nb"}, "control character"},
		{"CronBadTable", []string{"cron", "f", "--table", "Bad"}, "--table"},
		{"CronMalformedDSN", []string{"cron", "f", "--dsn", "postgres://u:hunter2@host:notaport/db"}, "invalid connection string"},
		{"CronMissingFile", []string{"cron", "/nonexistent/crontab"}, "cannot read the crontab: open /nonexistent/crontab"},
		{"JobsTwoArgs", []string{"jobs", "a", "b"}, "at most one JOB"},
		{"JobsLimitWithoutJob", []string{"jobs", "--limit", "5"}, "--limit needs a JOB"},
		{"JobsLimitZero", []string{"jobs", "a", "--limit", "0"}, "show 1 to 1000 runs"},
		{"JobsEmptyName", []string{"jobs", ""}, "invalid job name"},
		{"JobsBadTable", []string{"jobs", "--table", "x;y"}, "--table"},
	}...)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// pglease run's own failures exit 125 (never COMMAND's 1 or
			// 2); the other commands' usage errors exit 2.
			want := 2
			if i < len(badRunInputs) {
				want = 125
			}
			code, stdout, stderr := mainInProcess(t, tc.args...)
			if code != want {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, want, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.msg) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.msg)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Errorf("password in stderr: %q", stderr)
			}
			if stdout != "" && tc.args != nil {
				t.Errorf("stdout not empty: %q", stdout)
			}
		})
	}
}

func TestHelpInProcess(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"help", "run"},
		{"run", "--help"}, {"run", "NAME", "-h"}, {"ls", "--help"}, {"status", "--help"},
		{"release", "--help"}, {"migrate", "--help"}, {"schema", "--help"}, {"cleanup", "--help"},
		{"version", "--help"}, {"completion", "--help"}, {"demo", "--help"},
		{"list", "--help"}, {"help", "--help"}, {"help", "list"}, {"-h", "ls"},
		{"cron", "--help"}, {"help", "cron"}, {"jobs", "--help"}, {"cron", "f", "-h"},
	} {
		code, stdout, stderr := mainInProcess(t, args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "Usage") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
		if len(args) > 1 && args[0] != "help" && !strings.Contains(stdout, "Example") {
			t.Errorf("%v: help without examples", args)
		}
	}
}

func TestOfflineCommandsInProcess(t *testing.T) {
	code, stdout, _ := mainInProcess(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "pglease ") {
		t.Errorf("version: %d %q", code, stdout)
	}
	code, stdout, _ = mainInProcess(t, "schema", "--table", "ops.leases")
	if code != 0 || !strings.Contains(stdout, `CREATE TABLE IF NOT EXISTS "ops"."leases"`) || !strings.Contains(stdout, "CREATE SCHEMA") ||
		!strings.Contains(stdout, `CREATE TABLE IF NOT EXISTS "ops"."leases_jobs"`) || !strings.Contains(stdout, `"ops"."leases_runs"`) {
		t.Errorf("schema: %d %q", code, stdout)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, stdout, _ = mainInProcess(t, "completion", sh)
		if code != 0 || !strings.Contains(stdout, "pglease") || !strings.Contains(stdout, "fast-failover") {
			t.Errorf("completion %s: %d", sh, code)
		}
	}
}
