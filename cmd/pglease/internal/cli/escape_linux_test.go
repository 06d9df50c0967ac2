package cli_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Descendants that leave COMMAND's process group are COMMAND's all the
// same: when the command exits, pglease ends them too (SIGTERM, SIGKILL
// after the grace; these ignore SIGTERM) and releases the lease only once
// they are gone, so the next holder never runs beside them.
func TestRunEscapedDescendantsAreTheCommands(t *testing.T) {
	t.Parallel()
	// Each escapee ignores SIGTERM, writes its pid and lives on.
	escapee := func(pidFile string) string {
		return `sh -c 'trap "" TERM; echo $$ > ` + pidFile + `; while :; do sleep 1; done'`
	}
	for _, tc := range []struct{ name, how string }{
		{"setsid", "setsid %s &"},
		{"setpgid", "perl -e 'setpgrp(0, 0); exec @ARGV' %s &"},
		// The middle process exits at once: the escapee is re-parented.
		{"double fork", "(setsid %s &)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, table := tableEnv(t)
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "escapee")
			// The command leaves the escapee behind once it has started.
			script := strings.Replace(tc.how, "%s", escapee(pidFile), 1) + "\n while [ ! -s " + pidFile + " ]; do sleep 0.01; done"
			code, _, stderr := run(t, env, "run", "escape", "--ttl", "4s", "--kill-grace", "300ms", "--table", table, "--", "sh", "-c", script)
			if code != 0 {
				t.Fatalf("exit %d, want the command's 0: %s", code, stderr)
			}
			pid := readInt(t, pidFile)
			if alive(pid) {
				t.Fatalf("pglease exited, releasing the lease, while the command's escaped descendant %d lived", pid)
			}
			if code, _, stderr := run(t, env, "run", "escape", "--table", table, "--", "true"); code != 0 {
				t.Fatalf("the lease was not released: exit %d: %s", code, stderr)
			}
		})
	}
}

// When pglease is SIGKILLed, or the lease is lost, the supervisor ends the
// descendants that left the group with the group.
func TestEscapedDescendantsDieWithTheJob(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"pglease killed", "lease lost"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			env, table := tableEnv(t)
			pidFile := filepath.Join(t.TempDir(), "escapee")
			p := start(t, env, "run", "escape", "--ttl", "4s", "--kill-grace", "300ms", "--table", table, "--", "sh", "-c",
				`setsid sh -c 'trap "" TERM; echo $$ > `+pidFile+`; while :; do sleep 1; done' &
				 while :; do sleep 1; done`)
			pid := readInt(t, pidFile)
			if how == "pglease killed" {
				p.signal(syscall.SIGKILL)
			} else if code, _, stderr := run(t, env, "release", "escape", "--force", "--table", table); code != 0 {
				t.Fatalf("release --force: exit %d: %s", code, stderr)
			}
			p.wait()
			waitFor(t, "the escaped descendant to die with the job", func() bool { return !alive(pid) })
		})
	}
}
