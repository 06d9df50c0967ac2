//go:build unix

package cli_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

type lsEntry struct {
	Name         string  `json:"name"`
	Owner        string  `json:"owner"`
	Token        int64   `json:"token"`
	State        string  `json:"state"`
	TTL          float64 `json:"ttl_seconds"`
	SessionBound bool    `json:"session_bound"`
	Kind         string  `json:"kind"`
	Of           string  `json:"of"`
	Size         int     `json:"size"`
	Weight       int     `json:"weight"`
	Shared       bool    `json:"shared"`
	Waiters      []struct {
		Owner  string    `json:"owner"`
		Since  time.Time `json:"since"`
		Waited float64   `json:"waited_seconds"`
		Kind   string    `json:"kind"`
		Shared bool      `json:"shared"`
	} `json:"waiters"`
}

func lsJSON(t *testing.T, env []string, table string) map[string]lsEntry {
	t.Helper()
	code, stdout, stderr := run(t, env, "ls", "--json", "--table", table)
	if code != 0 {
		t.Fatalf("ls --json: exit %d: %s", code, stderr)
	}
	var list []lsEntry
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, stdout)
	}
	m := map[string]lsEntry{}
	for _, e := range list {
		m[e.Name] = e
	}
	return m
}

func TestAdminCommands(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	if code, stdout, stderr := run(t, env, "migrate", "--table", table); code != 0 || !strings.Contains(stdout, "ready") {
		t.Fatalf("migrate: %d %s %s", code, stdout, stderr)
	}
	if code, stdout, _ := run(t, env, "ls", "--table", table); code != 0 || !strings.Contains(stdout, "no leases") {
		t.Fatalf("ls on an empty table: %d %q", code, stdout)
	}

	holder := holdLease(t, env, table, "nightly-report", "--owner", "host-a", "--fast-failover", "--ttl", "3s")
	evil := "evil\x1b[31mred\nline"
	holdLease(t, env, table, evil)
	long := strings.Repeat("L", 255)
	holdLease(t, env, table, long)
	// An expired row: its holder is SIGKILLed and it is not session-bound.
	gone := holdLease(t, env, table, "abandoned", "--ttl", "1s")
	gone.signal(syscall.SIGKILL)
	gone.wait()

	code, stdout, stderr := run(t, env, "ls", "--table", table)
	if code != 0 {
		t.Fatalf("ls: %d %s", code, stderr)
	}
	t.Logf("pglease ls:\n%s", stdout)
	for _, want := range []string{"NAME", "OWNER", "TOKEN", "HELD FOR", "EXPIRES IN", "HEARTBEAT AGE", "STATE",
		"nightly-report", "host-a", "held", `"evil\x1b[31mred\nline"`, "…"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("ls output lacks %q", want)
		}
	}
	if strings.ContainsAny(stdout, "\x1b") || strings.Contains(stdout, long) {
		t.Error("ls printed a control character or an unshortened long name")
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	col := strings.Index(lines[0], "OWNER")
	for _, l := range lines[1:] {
		if len([]rune(l)) > col && strings.Contains(l, "host-a") && strings.Index(l, "host-a") != col {
			t.Errorf("columns not aligned:\n%s", stdout)
		}
	}

	leases := lsJSON(t, env, table)
	if e := leases["nightly-report"]; e.Owner != "host-a" || e.State != "held" || e.Token <= 0 || !e.SessionBound || e.TTL != 3 ||
		e.Kind != "plain" || e.Of != "" || e.Size != 0 || e.Weight != 1 || e.Shared {
		t.Errorf("ls --json entry: %+v", e)
	}
	if _, ok := leases[evil]; !ok {
		t.Error("ls --json lacks the control-character name")
	}
	if _, ok := leases[long]; !ok {
		t.Error("ls --json lacks the full long name")
	}

	if code, _, _ := run(t, env, "status", "nightly-report", "--table", table); code != 0 {
		t.Errorf("status of a held lease: exit %d", code)
	}
	if code, stdout, _ := run(t, env, "status", "never-taken", "--table", table); code != 3 || !strings.Contains(stdout, "free") {
		t.Errorf("status of a free lease: exit %d %q", code, stdout)
	}
	waitFor(t, "the abandoned lease to expire", func() bool {
		return lsJSON(t, env, table)["abandoned"].State == "expired"
	})
	if code, _, _ := run(t, env, "status", "abandoned", "--table", table); code != 3 {
		t.Errorf("status of an expired lease: exit %d", code)
	}
	if code, stdout, _ := run(t, env, "cleanup", "--table", table); code != 0 || !strings.Contains(stdout, "deleted 1 ") {
		t.Errorf("cleanup: exit %d %q", code, stdout)
	}

	code, stdout, _ = run(t, env, "release", "--force", "nightly-report", "--table", table)
	if code != 0 || !strings.Contains(stdout, "released nightly-report: owner host-a, token") {
		t.Errorf("release: exit %d %q", code, stdout)
	}
	if code := holder.wait(); code != 76 {
		t.Errorf("holder of a force-released lease: exit %d, want 76", code)
	}
	if code, _, stderr := run(t, env, "release", "--force", "nightly-report", "--table", table); code != 3 || !strings.Contains(stderr, "no lease") {
		t.Errorf("release of a missing lease: exit %d %q", code, stderr)
	}
}

// pglease ls names a row of a kind it does not know (one a later version
// may add) as the table records it, with the units of its kind's size the
// row takes, in the table and in --json, and the kind of the waits for
// its name; status likewise.
func TestLsShowsAKindItDoesNotKnow(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	if code, _, stderr := run(t, env, "migrate", "--table", table); code != 0 {
		t.Fatalf("migrate: %d %s", code, stderr)
	}
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), table)
	leases.InsertOfKind("q#0", "later-holder", 1<<40, time.Minute, "later", "q", 10, 3)
	leases.QueueShared("q", "q-reader")

	code, stdout, stderr := run(t, env, "ls", "--table", table)
	if code != 0 {
		t.Fatalf("ls: exit %d: %s", code, stderr)
	}
	t.Logf("pglease ls:\n%s", stdout)
	for _, want := range []string{"later-holder", "held (later, 3 of 10)", "q-reader ", " (later)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("ls output lacks %q", want)
		}
	}
	e, ok := lsJSON(t, env, table)["q#0"]
	if !ok || e.Owner != "later-holder" || e.State != "held" || e.Kind != "later" || e.Of != "q" || e.Size != 10 ||
		e.Weight != 3 || e.Shared || len(e.Waiters) != 1 || e.Waiters[0].Owner != "q-reader" ||
		e.Waiters[0].Kind != "later" || !e.Waiters[0].Shared {
		t.Errorf("ls --json entry of the later kind's row: %+v", e)
	}
	code, stdout, _ = run(t, env, "status", "q#0", "--table", table)
	if code != 0 || !strings.Contains(stdout, "held (later, 3 of 10)") || !strings.Contains(stdout, "q-reader ") {
		t.Errorf("status: exit %d\n%s", code, stdout)
	}
}

func TestAdminShowsStaleLease(t *testing.T) {
	t.Parallel()
	_, table := tableEnv(t)
	direct := []string{"PGLEASE_DSN=" + pgtest.DSN(t)}
	proxy := pgtest.NewProxy(t, pgtest.HostPort(t, pgtest.DSN(t)))
	viaProxy := []string{"PGLEASE_DSN=" + proxy.DSN(pgtest.DSN(t))}
	// A lease is stale from half its TTL without a heartbeat until it
	// expires: a 10s TTL leaves the polls 5s to see it so.
	holdLease(t, viaProxy, table, "zombie", "--ttl", "10s")
	proxy.Blackhole(true)
	waitFor(t, "the lease to show as stale", func() bool {
		state := lsJSON(t, direct, table)["zombie"].State
		if state == "expired" {
			t.Fatal("the lease expired without ever showing as stale")
		}
		return state == "stale"
	})
}

// TestBadInputChangesNothing runs every bad command line through the
// binary with a reachable database: each exits 125 (pglease run's own
// failure) with a message, and nothing was created.
func TestBadInputChangesNothing(t *testing.T) {
	env := []string{"PGLEASE_DSN=" + pgtest.DSN(t)}
	before := pgtest.Value[int](t, "SELECT count(*)::int FROM pg_class") + pgtest.Value[int](t, "SELECT count(*)::int FROM pg_namespace")
	for _, tc := range badRunInputs {
		code, stdout, stderr := run(t, env, tc.args...)
		if code != 125 || !strings.Contains(stderr, tc.msg) || stdout != "" {
			t.Errorf("%s: exit %d, stderr %q, stdout %q", tc.name, code, stderr, stdout)
		}
		if strings.Contains(stderr, "hunter2") {
			t.Errorf("%s: password in stderr", tc.name)
		}
	}
	after := pgtest.Value[int](t, "SELECT count(*)::int FROM pg_class") + pgtest.Value[int](t, "SELECT count(*)::int FROM pg_namespace")
	if before != after {
		t.Errorf("bad input changed the database: %d relations and schemas before, %d after", before, after)
	}
}

// A table pglease cannot use is reported as such, with what to do in the
// tool's own terms (the library names admin.Migrate), and left as it was.
func TestAdminReportsAnUnusableTableWithTheMigrateCommand(t *testing.T) {
	t.Parallel()
	env, table := noTableEnv(t)
	pgtest.Exec(t, "CREATE TABLE "+table+" (x int)")
	for _, args := range [][]string{{"ls"}, {"migrate"}} {
		code, stdout, stderr := run(t, env, append(args, "--table", table)...)
		if code != 1 || !strings.Contains(stderr, "unusable lease table") || !strings.Contains(stderr, "'pglease migrate'") {
			t.Errorf("%s on a foreign table: exit %d, stdout %q, stderr %q; want exit 1 naming the unusable table and 'pglease migrate'", args[0], code, stdout, stderr)
		}
	}
	if n := pgtest.Value[int](t, "SELECT count(*)::int FROM information_schema.columns WHERE table_schema || '.' || table_name = $1", table); n != 1 {
		t.Fatalf("the foreign table has %d columns, want its 1", n)
	}
}

// pglease ls and status show who waits: a run waiting for a held name is
// listed with its owner, in the table and in --json, until it holds the
// lease itself.
func TestListShowsQueuedWaiters(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	holder := holdLease(t, env, table, "report", "--owner", "holder-1")
	waiter := start(t, env, "run", "report", "--wait", "--owner", "waiter-1", "--table", table, "--", "true")
	var entry lsEntry
	waitFor(t, "the waiting run in ls --json", func() bool {
		entry = lsJSON(t, env, table)["report"]
		return len(entry.Waiters) == 1
	})
	if w := entry.Waiters[0]; w.Owner != "waiter-1" || w.Since.IsZero() || w.Waited < 0 {
		t.Errorf("ls --json waiters: %+v, want waiter-1", entry.Waiters)
	}
	code, stdout, stderr := run(t, env, "ls", "--table", table)
	if code != 0 || !strings.Contains(stdout, "WAITING") || !strings.Contains(stdout, "waiter-1 ") {
		t.Fatalf("ls: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("pglease ls:\n%s", stdout)
	code, stdout, _ = run(t, env, "status", "report", "--table", table)
	if code != 0 || !strings.Contains(stdout, "waiter-1 ") {
		t.Errorf("status: exit %d\n%s", code, stdout)
	}
	holder.signal(syscall.SIGTERM)
	if code := waiter.wait(); code != 0 {
		t.Fatalf("the waiter: exit %d: %s", code, waiter.stderr)
	}
	if e := lsJSON(t, env, table)["report"]; len(e.Waiters) != 0 {
		t.Errorf("after the waiter ran: %+v", e)
	}
}
