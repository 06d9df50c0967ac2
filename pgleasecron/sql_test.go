package pgleasecron

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/pglease/pglease"
)

// Every statement of queries.sql is a field of queries and every field a
// statement of the file; each is built non-empty, without a placeholder
// left or a comment line kept.
func TestEveryStatementIsDefined(t *testing.T) {
	stmts := parse(queriesSQL)
	tb, err := tablesOf("s.t")
	if err != nil {
		t.Fatal(err)
	}
	q := reflect.ValueOf(build(tb))
	placeholder := regexp.MustCompile(`\{\{[^}]*\}\}`)
	fields := map[string]bool{}
	for i := range q.NumField() {
		f := q.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		fields[f.Name] = true
		text := q.Field(i).String()
		if _, ok := stmts[f.Name]; !ok || strings.TrimSpace(text) == "" {
			t.Errorf("queries.%s has no statement in queries.sql", f.Name)
		}
		if placeholder.MatchString(text) {
			t.Errorf("statement %s has an unreplaced placeholder %s", f.Name, placeholder.FindString(text))
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				t.Errorf("statement %s kept a comment line: %s", f.Name, line)
			}
		}
	}
	for name := range stmts {
		if !fields[name] {
			t.Errorf("queries.sql has statement %s, which queries lacks", name)
		}
	}
}

// The tables are named as they always were: TABLE_jobs and TABLE_runs,
// shortened with a hash beyond 63 bytes, in the lease table's schema.
func TestTablesAreNamedAfterTheLeaseTable(t *testing.T) {
	for _, tc := range []struct{ in, leases, jobs, runs string }{
		{"", `"pglease_leases"`, `"pglease_leases_jobs"`, `"pglease_leases_runs"`},
		{"ops.locks", `"ops"."locks"`, `"ops"."locks_jobs"`, `"ops"."locks_runs"`},
		{strings.Repeat("a", 63), `"` + strings.Repeat("a", 63) + `"`,
			`"` + strings.Repeat("a", 49) + `_2469b9e6_jobs"`, `"` + strings.Repeat("a", 49) + `_2469b9e6_runs"`},
	} {
		got, err := tablesOf(tc.in)
		if err != nil || got.leases != tc.leases || got.jobs != tc.jobs || got.runs != tc.runs {
			t.Errorf("tablesOf(%q) = %+v, %v; want %s, %s, %s", tc.in, got, err, tc.leases, tc.jobs, tc.runs)
		}
	}
	for _, bad := range []string{"Locks", "a.b.c", `a"b`, strings.Repeat("x", 64)} {
		if _, err := tablesOf(bad); !isInvalidIdentifier(err) {
			t.Errorf("tablesOf(%q) = %v, want an invalid identifier", bad, err)
		}
	}
}

// isInvalidIdentifier reports whether err is pglease's refusal of a table
// name: an *pglease.InvalidError of kind "identifier".
func isInvalidIdentifier(err error) bool {
	var ie *pglease.InvalidError
	return errors.As(err, &ie) && ie.Kind == "identifier"
}
