package store

import (
	"reflect"
	"strings"
	"testing"
)

// Macro calls take their arguments as written, split at the commas
// outside parentheses and quotes, and are expanded again in what they
// return.
func TestMacrosExpandNestedCalls(t *testing.T) {
	macros := map[string]macro{
		"pair":  fixed(2, func(a []string) string { return "[" + a[0] + "|" + a[1] + "]" }),
		"outer": fixed(1, func(a []string) string { return "{{pair(" + a[0] + ", x)}}" }),
	}
	for in, want := range map[string]string{
		`a {{pair(f(1, 2), 'x,)')}} b`:     `a [f(1, 2)|'x,)'] b`,
		`{{outer("a,b")}} {{table}}`:       `["a,b"|x] {{table}}`,
		`{{pair(g(h(1), 2), $1::text)}}{{`: `[g(h(1), 2)|$1::text]{{`,
	} {
		if got := expand(in, macros); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
	args, end := splitArgs("(a, (b, c), 'd)')x", 0)
	if !reflect.DeepEqual(args, []string{"a", "(b, c)", "'d)'"}) || end != 17 {
		t.Errorf("splitArgs: %q, %d", args, end)
	}
}

// Every advisory-lock key and every probe of a client's or a session's
// lock is written by a macro (macros.go), so that its seed and its form
// are defined once: the embedded files spell none of them out.
func TestLockKeysAreWrittenOnce(t *testing.T) {
	for file, text := range map[string]string{"queries.sql": queriesSQL, "functions.sql": functionsSQL, "session.sql": sessionSQL} {
		for name, stmt := range parse(text) {
			for _, raw := range []string{"hashtext", "pg_backend_pid() AND"} {
				if strings.Contains(stmt, raw) {
					t.Errorf("%s: statement %s writes %s… itself, not by a macro", file, name, raw)
				}
			}
		}
	}
}
