//go:build unix

package cli_test

// What the CLI says is true, and what it does is said (SPEC §4): status
// of a name however it is held, a --table nobody created, errors that
// name the action and the object, the scheduler refused by the server,
// and the server a command read.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pglease/pglease/cmd/pglease/internal/cli"
	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/pgleasecron"
)

// withTable is args with "--table table" before COMMAND's "--", if any.
func withTable(args []string, table string) []string {
	i := slices.Index(args, "--")
	if i < 0 {
		i = len(args)
	}
	return slices.Concat(args[:i], []string{"--table", table}, args[i:])
}

// status NAME says who holds NAME however it is held: both --shared
// holders, a semaphore's slot, a quota's holder; it exits 0 while any
// row is held and 3 once none is. A row's own name (schema#0) is that
// row alone, as ls names it.
func TestStatusSaysWhoHoldsANameHoweverHeld(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	a := holdLease(t, env, table, "schema", "--shared", "--owner", "app-1")
	b := holdLease(t, env, table, "schema", "--shared", "--owner", "app-2")
	holdLease(t, env, table, "pool", "--slots", "3", "--owner", "slot-holder")
	holdLease(t, env, table, "budget", "--quota", "10", "--weight", "4", "--owner", "quota-holder")

	code, stdout, stderr := run(t, env, "status", "schema", "--table", table)
	if code != 0 || !strings.Contains(stdout, "app-1") || !strings.Contains(stdout, "app-2") || !strings.Contains(stdout, "held (shared)") {
		t.Errorf("status of a name two --shared runs hold: exit %d, stdout:\n%s\nstderr %q; want exit 0 naming both", code, stdout, stderr)
	}
	code, stdout, _ = run(t, env, "status", "schema", "--json", "--table", table)
	var name struct {
		Name, State, Kind string
		Holders           []lsEntry
	}
	if err := json.Unmarshal([]byte(stdout), &name); err != nil {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	if code != 0 || name.Name != "schema" || name.State != "held" || name.Kind != "shared" || len(name.Holders) != 2 ||
		name.Holders[0].Of != "schema" || name.Holders[0].State != "held" {
		t.Errorf("status --json of a shared name: exit %d, %+v", code, name)
	}
	for lease, owner := range map[string]string{"pool": "slot-holder", "budget": "quota-holder"} {
		if code, stdout, stderr := run(t, env, "status", lease, "--table", table); code != 0 || !strings.Contains(stdout, owner) {
			t.Errorf("status %s: exit %d, stdout %q, stderr %q; want exit 0 naming %s", lease, code, stdout, stderr, owner)
		}
	}
	code, stdout, _ = run(t, env, "status", "schema#0", "--json", "--table", table)
	var row lsEntry
	if err := json.Unmarshal([]byte(stdout), &row); err != nil || code != 0 || row.Name != "schema#0" || row.Of != "schema" {
		t.Errorf("status of one row: exit %d, %+v, %v", code, row, err)
	}

	a.signal(syscall.SIGTERM)
	b.signal(syscall.SIGTERM)
	a.wait()
	b.wait()
	if code, stdout, _ := run(t, env, "status", "schema", "--table", table); code != 3 || !strings.Contains(stdout, "schema is free") {
		t.Errorf("status once both shared holders released: exit %d, %q; want 3, free", code, stdout)
	}
}

// Only the default table is created implicitly: run and cron with a
// --table nobody created (a missing schema, or a missing table in an
// existing one) exit without running anything or creating anything, and
// say how to create it; 'pglease migrate --table' does, and then they
// run. A role that may not create the schema is told so, not that it
// failed to create the table.
func TestATableThatDoesNotExistIsNeverCreated(t *testing.T) {
	t.Parallel()
	env, existing := tableEnv(t)
	missing := missingSchema(t, "cli_new")
	server := cli.ServerOf(pgtest.DSN(t))
	ran := filepath.Join(t.TempDir(), "ran")
	crontab := writeCrontab(t, "often @every 1s -- touch "+ran)
	for _, table := range []string{missing + ".leases", existing + "_typo"} {
		for _, args := range [][]string{{"run", "job", "--", "touch", ran}, {"cron", crontab}} {
			code, stdout, stderr := run(t, env, withTable(args, table)...)
			want := 125
			if args[0] == "cron" {
				want = 1
			}
			if code != want || stdout != "" || !strings.Contains(stderr, "there is no lease table "+table+" in "+server) ||
				!strings.Contains(stderr, "'pglease migrate --table "+table+"'") {
				t.Errorf("%s --table %s: exit %d, stdout %q, stderr %q; want exit %d naming the table, the server and 'pglease migrate --table'",
					args[0], table, code, stdout, stderr, want)
			}
			for _, rel := range []string{table, table + "_token_seq", table + "_waiters", table + "_jobs", table + "_runs"} {
				if pgtest.RelationExists(t, rel) {
					t.Fatalf("%s --table %s created %s", args[0], table, rel)
				}
			}
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("a command ran with a --table nobody created")
	}
	if pgtest.Value[int64](t, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", missing) != 0 {
		t.Fatalf("the schema %s was created", missing)
	}

	created := missing + ".leases"
	if code, stdout, stderr := run(t, env, "migrate", "--table", created); code != 0 || stdout != "lease table "+created+" is ready\n" {
		t.Fatalf("migrate --table %s: exit %d, stdout %q, stderr %q", created, code, stdout, stderr)
	}
	if code, _, stderr := run(t, env, "run", "job", "--table", created, "--", "touch", ran); code != 0 {
		t.Fatalf("run on the migrated table: exit %d: %s", code, stderr)
	}

	// The migration as a role that may not create a schema.
	denied := missing + "_denied"
	code, _, stderr := run(t, []string{"PGLEASE_DSN=" + pgtest.RoleDSN(t)}, "migrate", "--table", denied+".leases")
	if code != 1 || !strings.Contains(stderr, `create the schema "`+denied+`"`) ||
		!strings.Contains(stderr, "lacks the privilege to create a schema in the database") || strings.HasPrefix(stderr, "pglease: create the lease table") {
		t.Errorf("migrate as a role without CREATE on the database: exit %d, stderr %q; want exit 1 naming the schema's creation", code, stderr)
	}
}

// A privilege the role lacks is reported as the action that failed on the
// object the server named: the check of a table that exists (never "create
// the lease table"), on its schema, the table or its token sequence, each
// with what to grant.
func TestPrivilegeErrorsNameTheActionAndTheObject(t *testing.T) {
	t.Parallel()
	_, table := tableEnv(t)
	schema := strings.Split(table, ".")[0]
	for _, tc := range []struct {
		grants []string
		want   []string
	}{
		{nil, []string{"permission denied for schema " + schema, "lacks a privilege on the schema " + schema, "grant USAGE to the role"}},
		{[]string{"USAGE ON SCHEMA " + schema}, []string{"permission denied for table leases", "on the table leases", "grant it SELECT, INSERT, UPDATE and DELETE"}},
		{[]string{"USAGE ON SCHEMA " + schema, "SELECT, INSERT, UPDATE, DELETE ON " + table + ", " + table + "_waiters"},
			[]string{"permission denied for sequence leases_token_seq", "on the token sequence leases_token_seq", "grant it USAGE on the sequence"}},
	} {
		role := []string{"PGLEASE_DSN=" + pgtest.RoleDSN(t, tc.grants...)}
		for _, args := range [][]string{{"release", "job", "--force"}, {"run", "job", "--", "true"}} {
			code, _, stderr := run(t, role, withTable(args, table)...)
			if code == 0 || !strings.HasPrefix(stderr, "pglease: check the lease table") {
				t.Errorf("%s with grants %q: exit %d, stderr %q; want the check of the table named, not its creation", args[0], tc.grants, code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("%s with grants %q: stderr %q lacks %q", args[0], tc.grants, stderr, w)
				}
			}
		}
	}
}

// pglease cron, refused by the server on the scheduler's tables, exits at
// once naming the tables and what to grant, in pglease's own format,
// rather than retrying for ever while it looks healthy; pglease jobs
// names the read that failed and what to grant.
func TestCronRefusedOnItsTablesExitsSayingWhatToGrant(t *testing.T) {
	t.Parallel()
	_, table := tableEnv(t)
	ddl, err := pgleasecron.DDL(table)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, ddl)
	schema := strings.Split(table, ".")[0]
	role := []string{"PGLEASE_DSN=" + pgtest.RoleDSN(t, "USAGE ON SCHEMA "+schema,
		"SELECT, INSERT, UPDATE, DELETE ON "+table+", "+table+"_waiters", "USAGE ON SEQUENCE "+table+"_token_seq")}
	ran := filepath.Join(t.TempDir(), "ran")
	crontab := writeCrontab(t, "often @every 1s -- touch "+ran)

	jobs, runs := `"`+schema+`"."leases_jobs"`, `"`+schema+`"."leases_runs"`
	code, stdout, stderr := run(t, role, "cron", crontab, "--table", table)
	for _, w := range []string{`job "often": register the job in ` + jobs, "permission denied for table leases_jobs",
		"grant the role SELECT, INSERT, UPDATE and DELETE on " + jobs + " and " + runs} {
		if !strings.Contains(stderr, w) {
			t.Errorf("cron refused on its tables: stderr lacks %q", w)
		}
	}
	if code != 1 || strings.Contains(stderr, "level=") || strings.Contains(stderr, "retrying") {
		t.Errorf("cron refused on its tables: exit %d, stdout %q, stderr:\n%s\nwant exit 1 in pglease's format, without retrying", code, stdout, stderr)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the job ran")
	}

	code, _, stderr = run(t, role, "jobs", "--table", table)
	if code != 1 || !strings.Contains(stderr, "read the jobs in "+jobs) || !strings.Contains(stderr, "grant the role SELECT on "+jobs) {
		t.Errorf("jobs refused: exit %d, stderr %q; want exit 1 naming the read and what to grant", code, stderr)
	}
}

// With nothing that chooses a server (no --dsn, $PGLEASE_DSN,
// $DATABASE_URL or libpq variable), an administrative command says which
// one libpq's defaults lead to before it reads; with any of them, it says
// nothing more.
func TestAdminCommandsNameTheServerOfLibpqsDefaults(t *testing.T) {
	t.Parallel()
	home := []string{"HOME=" + t.TempDir(), "PGCONNECT_TIMEOUT=2"}
	_, _, stderr := run(t, home, "ls")
	if !strings.HasPrefix(stderr, "pglease: note: no --dsn, $PGLEASE_DSN, $DATABASE_URL or PG* variable is set: using libpq's defaults, database ") {
		t.Errorf("ls with libpq's defaults: stderr %q; want the note naming the server", stderr)
	}
	env, table := tableEnv(t)
	if _, _, stderr := run(t, env, "ls", "--table", table); strings.Contains(stderr, "note:") {
		t.Errorf("ls with $PGLEASE_DSN: stderr %q; want no note", stderr)
	}
}
