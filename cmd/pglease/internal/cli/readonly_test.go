//go:build unix

package cli_test

import (
	"strings"
	"testing"

	"github.com/pglease/pglease/cmd/pglease/internal/cli"
	"github.com/pglease/pglease/internal/pgtest"
)

// ls and status only read, and never take a table that is not there for
// an empty one: with a --table that does not exist (a missing schema, or
// a missing table in an existing one) they say so, naming it and the
// command that creates it, exit 1 and create nothing. Without --table, the
// default table missing is "no leases" (yet), exit 0, and "free", exit 3,
// saying that there is no table. Every answer names the table and the
// server it read.
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	env, existing := tableEnv(t)
	missing := missingSchema(t, "cli_ro")
	server := cli.ServerOf(pgtest.DSN(t))
	for _, table := range []string{missing + ".leases", existing + "_typo"} {
		for _, args := range [][]string{{"ls"}, {"ls", "--json"}, {"status", "x"}, {"status", "x", "--json"}} {
			code, stdout, stderr := run(t, env, append(args, "--table", table)...)
			if code != 1 || stdout != "" || !strings.Contains(stderr, "there is no lease table "+table+" in "+server) ||
				!strings.Contains(stderr, "'pglease migrate --table "+table+"'") {
				t.Errorf("%v --table %s: exit %d, stdout %q, stderr %q; want exit 1 naming the table, the server and 'pglease migrate --table'",
					args, table, code, stdout, stderr)
			}
		}
		if pgtest.Value[bool](t, "SELECT to_regclass($1) IS NOT NULL OR to_regclass($2) IS NOT NULL", table, table+"_token_seq") {
			t.Fatalf("a read-only command created %s or its sequence", table)
		}
	}
	if pgtest.Value[int64](t, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", missing) != 0 {
		t.Fatalf("a read-only command created the schema %s", missing)
	}

	// The table exists, empty.
	if code, stdout, stderr := run(t, env, "ls", "--table", existing); code != 0 || stdout != "no leases in "+existing+" ("+server+")\n" {
		t.Errorf("ls --table %s: exit %d, stdout %q, stderr %q; want no leases in the table, on the server", existing, code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, env, "ls", "--json", "--table", existing); code != 0 || strings.TrimSpace(stdout) != "[]" {
		t.Errorf("ls --json --table %s: exit %d, stdout %q, stderr %q; want []", existing, code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, env, "status", "x", "--table", existing); code != 3 || stdout != "x is free ("+existing+", "+server+")\n" {
		t.Errorf("status x --table %s: exit %d, stdout %q, stderr %q; want x is free, exit 3", existing, code, stdout, stderr)
	}

	// The default table, missing (a search_path without it).
	noDefault := append(env, "PGOPTIONS=-c search_path="+missing)
	if code, stdout, stderr := run(t, noDefault, "ls"); code != 0 ||
		!strings.HasPrefix(stdout, "no leases: there is no lease table pglease_leases in "+server+" yet") || stderr != "" {
		t.Errorf("ls without the default table: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, noDefault, "status", "x"); code != 3 ||
		stdout != "x is free: there is no lease table pglease_leases in "+server+" yet\n" || stderr != "" {
		t.Errorf("status without the default table: exit %d, stdout %q, stderr %q", code, stdout, stderr)
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
	// Without SELECT on the waiters table, the queues are unknown, and
	// ls says what to grant.
	if !strings.Contains(stderr, "cannot tell who waits") || !strings.Contains(stderr, "grant SELECT on the waiters table") {
		t.Errorf("ls as a role that may not read the queue: stderr %q", stderr)
	}
	code, stdout, stderr = run(t, ro, "status", "nightly", "--table", table)
	if code != 0 || !strings.Contains(stdout, "host-a") {
		t.Fatalf("status as a SELECT-only role: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := run(t, ro, "status", "other", "--table", table); code != 3 {
		t.Fatalf("status of a free name as a SELECT-only role: exit %d, stderr %q", code, stderr)
	}
}

// release --force, stepdown and cleanup act on leases that are there: with
// a mistyped --table (a missing schema, or a missing table in an existing
// one) they say there is no such table and how to find the right one, exit
// 1 and create nothing. On the table itself they work as before.
func TestAdminCommandsOnMissingTableCreateNothing(t *testing.T) {
	t.Parallel()
	env, existing := tableEnv(t)
	missing := missingSchema(t, "cli_admin")
	holdLease(t, env, existing, "nightly", "--owner", "host-a")
	server := cli.ServerOf(pgtest.DSN(t))
	for _, table := range []string{missing + ".leases", existing + "_typo"} {
		for _, c := range []struct {
			args []string
			what string
		}{
			{[]string{"release", "nightly", "--force"}, "so no lease nightly to release"},
			{[]string{"stepdown", "nightly"}, "so nothing holds nightly and nobody was asked to step down"},
			{[]string{"cleanup"}, "so there are no expired leases to delete"},
		} {
			code, stdout, stderr := run(t, env, append(c.args, "--table", table)...)
			want := "pglease: there is no lease table " + table + " in " + server + ", " + c.what + "; nothing was created or changed.\n" +
				"pglease: check the spelling of --table " + table + ": it must name the table your jobs use; to create it, run 'pglease migrate --table " + table + "'.\n"
			if code != 1 || stdout != "" || stderr != want {
				t.Errorf("%v --table %s: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", c.args, table, code, stdout, stderr, want)
			}
			if pgtest.Value[bool](t, "SELECT to_regclass($1) IS NOT NULL OR to_regclass($2) IS NOT NULL OR to_regclass($3) IS NOT NULL",
				table, table+"_token_seq", table+"_waiters") {
				t.Fatalf("%v --table %s created the table, its sequence or its waiters table", c.args, table)
			}
		}
	}
	if pgtest.Value[int64](t, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", missing) != 0 {
		t.Fatalf("an administrative command created the schema %s", missing)
	}
	// Without --table: the default table, and a hint to name another.
	if code, _, stderr := run(t, append(env, "PGOPTIONS=-c search_path="+missing), "cleanup"); code != 1 ||
		!strings.Contains(stderr, "there is no lease table pglease_leases in "+server) || !strings.Contains(stderr, "name it with --table") {
		t.Errorf("cleanup without --table on a database without pglease_leases: exit %d, stderr %q", code, stderr)
	}

	// The table spelled right: each works.
	if code, stdout, stderr := run(t, env, "release", "nightly", "--force", "--table", existing); code != 0 || !strings.Contains(stdout, "released nightly: owner host-a") {
		t.Errorf("release --force: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, env, "cleanup", "--table", existing); code != 0 || stdout != "deleted 0 expired lease(s)\n" {
		t.Errorf("cleanup: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := run(t, env, "stepdown", "nightly", "--table", existing); code != 3 || stderr != "pglease: nothing holds nightly\n" {
		t.Errorf("stepdown of a released lease: exit %d, stderr %q; want 3", code, stderr)
	}
}
