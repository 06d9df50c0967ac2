package pgleasecron

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/pglease/pglease"
)

//go:embed queries.sql
var queriesSQL string

// defaultTable is the lease table of a zero pglease.Config.
const defaultTable = "pglease_leases"

// tables are the database objects of the scheduler of one lease table.
type tables struct {
	schema string // as the lease table names it; "" for the search_path's first
	// leases, jobs and runs are quoted, schema-qualified names, as SQL
	// text and to_regclass read them.
	leases, jobs, runs string
}

// tablesOf returns the objects of the lease table "[schema.]table" ("" for
// the default): the table itself, and the jobs and runs tables named after
// it as pglease names a lease table's objects (docs/OPERATIONS.md): TABLE_jobs
// and TABLE_runs, shortened with a hash of TABLE beyond PostgreSQL's 63
// bytes. It returns the error pglease.Config.Validate returns for an invalid
// name.
func tablesOf(table string) (tables, error) {
	if err := (pglease.Config{Table: table}).Validate(); err != nil {
		return tables{}, err
	}
	if table == "" {
		table = defaultTable
	}
	var t tables
	name := table
	if schema, rest, ok := strings.Cut(table, "."); ok {
		t.schema, name = schema, rest
	}
	qualified := func(obj string) string {
		if t.schema == "" {
			return quote(obj)
		}
		return quote(t.schema) + "." + quote(obj)
	}
	t.leases = qualified(name)
	t.jobs = qualified(derived(name, "_jobs"))
	t.runs = qualified(derived(name, "_runs"))
	return t, nil
}

// quote returns s as a quoted SQL identifier. s has been validated, so the
// quoting is belt and braces.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// derived appends suffix to base, keeping the result within PostgreSQL's
// 63-byte identifier limit; long bases are shortened and made unique by a
// hash of the full base (32-bit FNV-1a). The names are those of tables that
// exist: the rule must not change.
func derived(base, suffix string) string {
	if len(base)+len(suffix) <= 63 {
		return base + suffix
	}
	h := uint32(2166136261)
	for i := 0; i < len(base); i++ {
		h ^= uint32(base[i])
		h *= 16777619
	}
	tag := fmt.Sprintf("_%08x", h)
	return base[:63-len(suffix)-len(tag)] + tag + suffix
}

// queries are the statements of queries.sql, with the identifiers of
// their tables filled in.
type queries struct {
	tables
	LockSchema, CreateJobs, CreateRuns, JobTablesExist string
	RegisterJob, JobState, ClaimTick                   string
	AwaitClaims, ClaimedTick                           string
	FinishRun, OrphanedRuns, AbandonRun                string
	RetryRun, Runs, Jobs                               string
}

// build renders the statements for the objects of t.
func build(t tables) queries {
	stmts := parse(queriesSQL)
	r := strings.NewReplacer("{{leases}}", t.leases, "{{jobs}}", t.jobs, "{{runs}}", t.runs)
	get := func(name string) string {
		s, ok := stmts[name]
		if !ok {
			panic("pgleasecron: queries.sql lacks statement " + name) // a build defect, caught by tests
		}
		return r.Replace(s)
	}
	return queries{tables: t,
		LockSchema: get("LockSchema"), CreateJobs: get("CreateJobs"), CreateRuns: get("CreateRuns"),
		JobTablesExist: get("JobTablesExist"),
		RegisterJob:    get("RegisterJob"), JobState: get("JobState"), ClaimTick: get("ClaimTick"),
		AwaitClaims: get("AwaitClaims"), ClaimedTick: get("ClaimedTick"),
		FinishRun: get("FinishRun"), OrphanedRuns: get("OrphanedRuns"), AbandonRun: get("AbandonRun"),
		RetryRun: get("RetryRun"), Runs: get("Runs"), Jobs: get("Jobs"),
	}
}

// parse splits queries.sql on its "-- name: X" lines. Comment lines are
// kept out of the statements.
func parse(src string) map[string]string {
	out := map[string]string{}
	var name string
	var b strings.Builder
	flush := func() {
		if name != "" {
			out[name] = strings.TrimSpace(b.String())
		}
		b.Reset()
	}
	for _, line := range strings.Split(src, "\n") {
		if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
			flush()
			name = strings.TrimSpace(rest)
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	flush()
	return out
}
