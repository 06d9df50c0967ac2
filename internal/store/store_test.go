package store

import (
	"strings"
	"testing"
)

func TestEveryStatementIsDefined(t *testing.T) {
	stmts := parse(queriesSQL)
	q := Build(Names{Schema: "s", Table: "t", Seq: "t_token_seq", Channel: "t"})
	for name, text := range map[string]string{"Acquire": q.Acquire, "Renew": q.Renew, "Release": q.Release,
		"Guard": q.Guard, "Get": q.Get, "List": q.List, "ForceRelease": q.ForceRelease, "Cleanup": q.Cleanup,
		"CreateTable": q.CreateTable, "Listen": q.Listen, "AwaitSession": q.AwaitSession} {
		if _, ok := stmts[name]; !ok || text == "" {
			t.Errorf("statement %s missing", name)
		}
		if strings.Contains(text, "{{") {
			t.Errorf("statement %s has an unreplaced placeholder:\n%s", name, text)
		}
		if strings.Contains(text, "--") {
			t.Errorf("statement %s kept a comment line", name)
		}
	}
	if !strings.Contains(q.Acquire, `nextval('"s"."t_token_seq"')`) {
		t.Errorf("sequence not quoted in Acquire:\n%s", q.Acquire)
	}
}

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
