//go:build unix

package cli_test

import (
	"strings"
	"syscall"
	"testing"
)

// --quota N --weight W: runs of a name hold W of its N units each, and
// never more than N between them; a run that does not fit exits 75
// without --wait, and with it waits, queued, until units are free. Runs
// of another capacity are refused as a misconfiguration, not a conflict;
// flags that make no quota are usage errors.
func TestRunQuotaHoldsAtMostItsUnits(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	big := holdLease(t, env, table, "pool", "--quota", "3", "--weight", "2", "--owner", "big")
	if code, _, stderr := run(t, env, "run", "pool", "--quota", "3", "--weight", "2", "--table", table, "--", "true"); code != 75 {
		t.Fatalf("2 units beside 2 of 3 held: exit %d, want 75: %s", code, stderr)
	}
	if code, _, stderr := run(t, env, "run", "pool", "--quota", "3", "--table", table, "--", "true"); code != 0 {
		t.Fatalf("the third unit: exit %d: %s", code, stderr)
	}
	code, _, stderr := run(t, env, "run", "pool", "--quota", "5", "--table", table, "--", "true")
	if code == 0 || code == 75 || !strings.Contains(stderr, "quota of 3 units") || !strings.Contains(stderr, "--quota 5") {
		t.Fatalf("--quota 5 beside a quota of 3: exit %d, %q; want a failure naming both", code, stderr)
	}
	waiter := start(t, env, "run", "pool", "--quota", "3", "--weight", "2", "--wait", "--owner", "waiter", "--table", table, "--", "true")
	waitFor(t, "the waiter queued", func() bool {
		for name, e := range lsJSON(t, env, table) {
			if strings.HasPrefix(name, "pool#") && len(e.Waiters) == 1 && e.Waiters[0].Owner == "waiter" {
				return true
			}
		}
		return false
	})
	code, stdout, _ := run(t, env, "ls", "--table", table)
	if code != 0 || !strings.Contains(stdout, "held (quota, 2 of 3)") || !strings.Contains(stdout, "waiter") || !strings.Contains(stdout, "(quota)") {
		t.Errorf("ls: exit %d\n%s", code, stdout)
	}
	t.Logf("pglease ls:\n%s", stdout)
	big.signal(syscall.SIGTERM)
	big.wait()
	if code := waiter.wait(); code != 0 {
		t.Fatalf("the waiter once 2 units were free: exit %d: %s", code, waiter.stderr)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--weight", "2"}, "--weight 2 needs --quota N"},
		{[]string{"--quota", "3", "--weight", "4"}, "invalid --quota 3 --weight 4"},
		{[]string{"--quota", "0"}, "invalid --quota 0"},
		{[]string{"--quota", "3", "--shared"}, "does not combine"},
	} {
		args := append(append([]string{"run", "pool"}, tc.args...), "--table", table, "--", "true")
		if code, _, stderr := run(t, env, args...); code != 125 || !strings.Contains(stderr, tc.says) {
			t.Errorf("%v: exit %d, %q; want 125 saying %q", tc.args, code, stderr, tc.says)
		}
	}
}
