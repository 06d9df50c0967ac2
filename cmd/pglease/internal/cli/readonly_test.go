//go:build unix

package cli_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// ls and status only read: on a table (or schema) that does not exist they
// report no leases and create nothing.
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	env, existing := tableEnv(t)
	missing := fmt.Sprintf("cli_ro_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { pgtest.Exec(t, "DROP SCHEMA IF EXISTS "+missing+" CASCADE") })
	for _, table := range []string{missing + ".leases", existing} {
		if code, stdout, stderr := run(t, env, "ls", "--table", table); code != 0 || strings.TrimSpace(stdout) != "no leases" {
			t.Fatalf("ls --table %s: exit %d, stdout %q, stderr %q; want no leases", table, code, stdout, stderr)
		}
		if code, stdout, stderr := run(t, env, "ls", "--json", "--table", table); code != 0 || strings.TrimSpace(stdout) != "[]" {
			t.Fatalf("ls --json --table %s: exit %d, stdout %q, stderr %q; want []", table, code, stdout, stderr)
		}
		if code, stdout, stderr := run(t, env, "status", "x", "--table", table); code != 3 || strings.TrimSpace(stdout) != "x is free" {
			t.Fatalf("status x --table %s: exit %d, stdout %q, stderr %q; want x is free, exit 3", table, code, stdout, stderr)
		}
		if pgtest.Value[bool](t, "SELECT to_regclass($1) IS NOT NULL OR to_regclass($2) IS NOT NULL", table, table+"_token_seq") {
			t.Fatalf("a read-only command created %s or its sequence", table)
		}
	}
	if pgtest.Value[int64](t, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", missing) != 0 {
		t.Fatalf("a read-only command created the schema %s", missing)
	}
}

// ls and status work as a role that may only read the table.
func TestReadOnlyCommandsNeedOnlySelect(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	if code, stdout, stderr := run(t, env, "migrate", "--table", table); code != 0 {
		t.Fatalf("migrate: exit %d: %s %s", code, stdout, stderr)
	}
	holdLease(t, env, table, "nightly", "--owner", "host-a")

	ro := []string{"PGLEASE_DSN=" + pgtest.SelectOnlyDSN(t, table)}

	code, stdout, stderr := run(t, ro, "ls", "--table", table)
	if code != 0 || !strings.Contains(stdout, "nightly") || !strings.Contains(stdout, "host-a") {
		t.Fatalf("ls as a SELECT-only role: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = run(t, ro, "status", "nightly", "--table", table)
	if code != 0 || !strings.Contains(stdout, "host-a") {
		t.Fatalf("status as a SELECT-only role: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := run(t, ro, "status", "other", "--table", table); code != 3 {
		t.Fatalf("status of a free name as a SELECT-only role: exit %d, stderr %q", code, stderr)
	}
}
