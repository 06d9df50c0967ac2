//go:build unix

package cli_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Two --shared runs of a name run side by side; a run without --shared
// (exclusive) waits for both, queued, and a --shared run started after it
// waits behind it: the exclusive run is served first, once the two shared
// ones are done, and the late shared run after it. pglease ls shows the
// queue with each waiter's kind. --shared and --slots do not combine.
func TestRunSharedSideBySideAndExclusiveFirst(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	a := holdLease(t, env, table, "schema", "--shared", "--owner", "app-1")
	b := holdLease(t, env, table, "schema", "--shared", "--owner", "app-2")
	entries := lsJSON(t, env, table)
	if e0, e1 := entries["schema#0"], entries["schema#1"]; e0.State != "held" || e1.State != "held" ||
		e0.Kind != "shared" || e1.Kind != "shared" || e0.Of != "schema" || e1.Of != "schema" || e0.Size != 0 || e0.Weight != 1 ||
		!e0.Shared || !e1.Shared || e0.Token == e1.Token {
		t.Fatalf("two --shared runs side by side: ls %+v", entries)
	}
	appendTo := func(word string) string { return "echo " + word + " >> " + log }
	migrate := start(t, env, "run", "schema", "--wait", "--owner", "migrator", "--table", table, "--",
		"sh", "-c", appendTo("exclusive-start")+"; sleep 0.3; "+appendTo("exclusive-end"))
	waitFor(t, "the exclusive run queued", func() bool { return len(lsJSON(t, env, table)["schema#0"].Waiters) == 1 })
	late := start(t, env, "run", "schema", "--shared", "--wait", "--owner", "app-3", "--table", table, "--",
		"sh", "-c", appendTo("late-shared"))
	var queue []string
	waitFor(t, "the late shared run queued behind the exclusive one", func() bool {
		queue = queue[:0]
		for _, w := range lsJSON(t, env, table)["schema#0"].Waiters {
			queue = append(queue, w.Owner+" "+w.Kind+" "+strconv.FormatBool(w.Shared))
		}
		return len(queue) == 2
	})
	if queue[0] != "migrator plain false" || queue[1] != "app-3 shared true" {
		t.Errorf("queue %v, want [migrator plain false, app-3 shared true]", queue)
	}
	code, stdout, _ := run(t, env, "ls", "--table", table)
	if code != 0 || !strings.Contains(stdout, "held (shared)") || !strings.Contains(stdout, "app-3 ") || !strings.Contains(stdout, "(shared)") {
		t.Errorf("ls: exit %d\n%s", code, stdout)
	}
	t.Logf("pglease ls:\n%s", stdout)
	if _, err := os.Stat(log); err == nil {
		t.Fatalf("a command ran while two shared runs held the name: %s", readFile(t, log))
	}
	a.signal(syscall.SIGTERM)
	b.signal(syscall.SIGTERM)
	a.wait()
	b.wait()
	if code := migrate.wait(); code != 0 {
		t.Fatalf("the exclusive run: exit %d: %s", code, migrate.stderr)
	}
	if code := late.wait(); code != 0 {
		t.Fatalf("the late shared run: exit %d: %s", code, late.stderr)
	}
	if got := strings.Fields(readFile(t, log)); strings.Join(got, " ") != "exclusive-start exclusive-end late-shared" {
		t.Errorf("order %v, want the exclusive run first, then the late shared one", got)
	}
	code, _, stderr := run(t, env, "run", "schema", "--shared", "--slots", "2", "--table", table, "--", "true")
	if code != 125 || !strings.Contains(stderr, "do not combine") {
		t.Errorf("--shared --slots 2: exit %d, %q", code, stderr)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
