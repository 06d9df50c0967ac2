package store

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// Every statement of queries.sql is a field of Queries and
// every field is a statement of the file, so that neither a new statement nor a new field
// can be missed; each is built non-empty, without a placeholder left or a
// comment line kept.
func TestEveryStatementIsDefined(t *testing.T) {
	stmts := statements()
	if len(stmts) == 0 {
		t.Fatal("queries.sql has no statements")
	}
	n, err := ParseTable("s.t")
	if err != nil {
		t.Fatal(err)
	}
	q := Build(n)
	fields := map[string]bool{}
	checkStatements(t, stmts, reflect.ValueOf(q), fields)
	for name := range stmts {
		if !fields[name] && fragments[name] == "" && fragmentMacros[name] == nil {
			t.Errorf("queries.sql has statement %s, which Queries lacks", name)
		}
	}
	if !strings.Contains(q.CreateAcquire, `nextval('"s"."t_token_seq"')`) {
		t.Errorf("sequence not quoted in CreateAcquire:\n%s", q.CreateAcquire)
	}
	if !strings.Contains(q.Acquire, `"s"."t_acquire"(`) || !strings.Contains(q.CreateAcquire, `FUNCTION "s"."t_acquire"(`) {
		t.Errorf("function not named after the table:\n%s", q.Acquire)
	}
}

// checkStatements checks each field of v (a Queries) against
// the file's statements and records it in fields.
func checkStatements(t *testing.T, stmts map[string]string, v reflect.Value, fields map[string]bool) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.String {
			t.Errorf("Queries.%s is a %s, want a statement's text", f.Name, f.Type)
			continue
		}
		fields[f.Name] = true
		if _, ok := stmts[f.Name]; !ok {
			t.Errorf("Queries.%s has no statement in queries.sql", f.Name)
		}
		text := v.Field(i).String()
		if strings.TrimSpace(text) == "" {
			t.Errorf("statement %s is empty", f.Name)
		}
		if placeholder.MatchString(text) {
			t.Errorf("statement %s has an unreplaced placeholder %s:\n%s", f.Name, placeholder.FindString(text), text)
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				t.Errorf("statement %s kept a comment line: %s", f.Name, line)
			}
		}
	}
}

// placeholder matches a {{name}} that Build did not replace.
var placeholder = regexp.MustCompile(`\{\{[^}]*\}\}`)

func TestParseTable(t *testing.T) {
	for _, tc := range []struct {
		in, schema, table string
		ok                bool
	}{
		{"", "", DefaultTable, true},
		{"locks", "", "locks", true},
		{"ops.locks", "ops", "locks", true},
		{"_a1.b_2", "_a1", "b_2", true},
		{"Locks", "", "", false},
		{"ops.Locks", "", "", false},
		{`a"b`, "", "", false},
		{"a;drop", "", "", false},
		{"a.b.c", "", "", false},
		{"é", "", "", false},
		{strings.Repeat("x", 64), "", "", false},
		{strings.Repeat("x", 63), "", strings.Repeat("x", 63), true},
	} {
		n, err := ParseTable(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (n.Schema != tc.schema || n.Table != tc.table)) {
			t.Errorf("ParseTable(%q) = %+v, %v", tc.in, n, err)
		}
		if tc.ok && (len(n.Seq) > 63 || !ValidIdentifier(n.Seq)) {
			t.Errorf("ParseTable(%q): invalid sequence name %q", tc.in, n.Seq)
		}
	}
}

func TestDerivedNamesStayDistinct(t *testing.T) {
	a := derived(strings.Repeat("a", 60)+"one", "_token_seq")
	b := derived(strings.Repeat("a", 60)+"two", "_token_seq")
	if a == b || len(a) > 63 || len(b) > 63 {
		t.Fatalf("derived names %q and %q", a, b)
	}
	if got := derived("short", "_token_seq"); got != "short_token_seq" {
		t.Fatalf("derived = %q", got)
	}
}

// Function bodies read their parameters by name: no positional $n in
// functions.sql nor in the DDL built from it (its macros included), so that
// a parameter added to a signature cannot shift what a body reads.
func TestFunctionBodiesUseParameterNames(t *testing.T) {
	positional := regexp.MustCompile(`\$[0-9]`)
	if loc := positional.FindStringIndex(functionsSQL); loc != nil {
		t.Errorf("functions.sql reads a parameter by position: %q", functionsSQL[max(0, loc[0]-60):loc[1]])
	}
	s, err := New("ops.locks")
	if err != nil {
		t.Fatal(err)
	}
	if loc := positional.FindStringIndex(s.DDL()); loc != nil {
		ddl := s.DDL()
		t.Errorf("the DDL reads a parameter by position: %q", ddl[max(0, loc[0]-60):loc[1]])
	}
}
