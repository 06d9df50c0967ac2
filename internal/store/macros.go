package store

import (
	"strconv"
	"strings"
)

// A macro is a piece of SQL that takes arguments: a call {{name(a, b)}}
// in an embedded file is replaced by the macro's text for those
// arguments (SQL expressions, written as they are to appear), before the
// identifiers are filled in. Macros are expanded by render, in Go: they
// add no database object and nothing for the planner to inline.
type macro func(args []string) string

// fragmentMacros are the fragments of queries.sql that take arguments, by
// statement name: the names of their parameters, which the fragment's text
// writes {{.name}}. A fragment X is called {{x(…)}} (its name in lower
// case).
var fragmentMacros = map[string][]string{"Head": {"name"}, "RowKind": {"row"}}

// The seeds of the advisory-lock keys, each of which locks one thing.
// A key is hashtextextended(namespace || id, seed), a bigint; the
// namespace is the table's (see LockNamespace), so tables never share
// keys, and the seed keeps one table's kinds of keys apart. A name's own
// lock is in the two-int4 key space instead ({{name_key(…)}}), which never meets
// the bigint one.
const (
	// seedSchema keys the lock a migration holds on the schema it creates
	// or changes objects in (SchemaLock); its id is the schema's name.
	seedSchema = 0
	// seedClient keys a client's client lock (ClientLock), held by its
	// dedicated session for as long as it lives: its queued waits are
	// live while the lock is held. The id is the client's random id.
	seedClient = 1
	// seedSession keys a session's session lock (SessionLock), held by a
	// dedicated session for as long as it lives: it binds the session's
	// session-bound rows, which record its pid, the id.
	seedSession = 3
	// seedBell keys bell 0 of a client's doorbell (Ring); bell i, from 0
	// to 15, is seedBell+i. The id is the client's random id.
	seedBell = 16
)

// keyMacros define each advisory-lock key and each probe of one once; the
// embedded files call them with SQL expressions (see the seeds above):
//
//   - {{name_key(ns, name)}}: a name's lock (two int4 keys), which every
//     acquisition of the name takes first, for the rest of its
//     transaction;
//   - {{schema_key(id)}}, {{client_key(ns, client)}}, {{session_key(ns,
//     pid)}}, {{bell_key(ns, client, i)}}: the bigint keys of the seeds;
//   - {{bell_free(ns, client, i)}}: true when bell i of the client is
//     free; the look is a session-level shared lock, freed at once, so
//     that no lock of the bell is held after it (a ring taking the bell
//     never waits for one, even while the statement goes on to wait);
//   - {{ring(ns, client, held)}}: rings the client's doorbell from the
//     bell held (an int expression) to the next: takes that one and frees
//     the one held (two columns, as Ring in session.sql selects them); run
//     by the session that holds the bell;
//   - {{held_bells(ns, client)}}: the bells the client holds, in order,
//     as a subquery of one column, k (none: its session is down, or it is
//     of a version without bells; two, adjacent: it is ringing);
//   - {{client_gone(ns, client)}}: true when the client lock is free (no
//     dedicated session of the client lives), and then held shared until
//     the transaction ends. The client's own session, which holds it, may
//     take it shared too (a backend's locks do not conflict with each
//     other): it is not gone when this backend holds it (schema version
//     11; before, a client's own queued wait, for an exclusive lease of a
//     name it held shared, counted as gone at its own session's release,
//     and was not woken);
//   - {{session_gone(ns, pid)}}: the same of a session lock;
//   - {{session_ended(ns, pid, here)}}: the session of a session-bound
//     row has ended: the row records a pid, not this backend's, of a
//     session of this server incarnation (here: a condition on the row)
//     whose session lock is free (a row of another incarnation is
//     trusted no further than a plain row, see CreateAcquire).
var keyMacros = map[string]macro{
	"name_key": fixed(2, func(a []string) string {
		return "hashtext(" + a[0] + " || " + a[1] + "), hashtext(" + a[1] + " || " + a[0] + ")"
	}),
	"schema_key": fixed(1, func(a []string) string {
		return "hashtextextended(" + a[0] + ", " + strconv.Itoa(seedSchema) + ")"
	}),
	"client_key": fixed(2, func(a []string) string {
		return "hashtextextended(" + a[0] + " || " + a[1] + ", " + strconv.Itoa(seedClient) + ")"
	}),
	"session_key": fixed(2, func(a []string) string {
		return "hashtextextended(" + a[0] + " || " + a[1] + "::text, " + strconv.Itoa(seedSession) + ")"
	}),
	"bell_key": fixed(3, func(a []string) string {
		if a[2] == "0" {
			return "hashtextextended(" + a[0] + " || " + a[1] + ", " + strconv.Itoa(seedBell) + ")"
		}
		return "hashtextextended(" + a[0] + " || " + a[1] + ", " + strconv.Itoa(seedBell) + " + " + a[2] + ")"
	}),
	"bell_free": fixed(3, func(a []string) string {
		k := "{{bell_key(" + a[0] + ", " + a[1] + ", " + a[2] + ")}}"
		return "(CASE WHEN pg_try_advisory_lock_shared(" + k + ") THEN pg_advisory_unlock_shared(" + k + ") ELSE false END)"
	}),
	"ring": fixed(3, func(a []string) string {
		next := "((" + a[2] + ") + 1) % " + strconv.Itoa(Bells)
		return "pg_advisory_lock({{bell_key(" + a[0] + ", " + a[1] + ", " + next + ")}}), " +
			"pg_advisory_unlock({{bell_key(" + a[0] + ", " + a[1] + ", " + a[2] + ")}})"
	}),
	"held_bells": fixed(2, func(a []string) string {
		return "SELECT b.k FROM generate_series(0, " + strconv.Itoa(Bells-1) + ") AS b(k)" +
			" WHERE NOT {{bell_free(" + a[0] + ", " + a[1] + ", b.k)}} ORDER BY b.k"
	}),
	"client_gone": fixed(2, func(a []string) string {
		k := "{{client_key(" + a[0] + ", " + a[1] + ")}}"
		return "(CASE WHEN pg_try_advisory_xact_lock_shared(" + k + ") THEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS pl" +
			" WHERE pl.locktype = 'advisory' AND pl.pid = pg_backend_pid() AND pl.granted AND pl.mode = 'ExclusiveLock'" +
			" AND pl.objsubid = 1 AND pl.classid::bigint = ((" + k + ") >> 32) & 4294967295 AND pl.objid::bigint = (" + k + ") & 4294967295)" +
			" ELSE false END)"
	}),
	"session_gone": fixed(2, func(a []string) string {
		return "pg_try_advisory_xact_lock_shared({{session_key(" + a[0] + ", " + a[1] + ")}})"
	}),
	"session_ended": fixed(3, func(a []string) string {
		return "(" + a[1] + " IS NOT NULL AND " + a[1] + " <> pg_backend_pid() AND " + a[2] +
			" AND {{session_gone(" + a[0] + ", " + a[1] + ")}})"
	}),
}

// fixed is a macro of n arguments.
func fixed(n int, f func([]string) string) macro {
	return func(args []string) string {
		if len(args) != n {
			panic("store: an SQL macro takes " + strconv.Itoa(n) + " arguments, not " + strconv.Itoa(len(args))) // a build defect, caught by tests
		}
		return f(args)
	}
}

// sqlMacros are the macros the embedded files may call: keyMacros and the
// fragments that take arguments (fragmentMacros).
func sqlMacros(stmts map[string]string) map[string]macro {
	macros := map[string]macro{}
	for name, m := range keyMacros {
		macros[name] = m
	}
	for name, params := range fragmentMacros {
		macros[strings.ToLower(name)] = fragmentMacro(name, stmts[name], params)
	}
	return macros
}

// fragmentMacro is the macro of the fragment text with the parameters
// params.
func fragmentMacro(name, text string, params []string) macro {
	return func(args []string) string {
		if len(args) != len(params) {
			panic("store: SQL macro " + name + " takes " + strings.Join(params, ", ")) // a build defect, caught by tests
		}
		var pairs []string
		for i, p := range params {
			pairs = append(pairs, "{{."+p+"}}", args[i])
		}
		return strings.NewReplacer(pairs...).Replace(text)
	}
}

// expand replaces every macro call in s, and again in what the macros
// return, until none is left.
func expand(s string, macros map[string]macro) string {
	for range 8 {
		var n int
		if s, n = expandOnce(s, macros); n == 0 {
			return s
		}
	}
	panic("store: SQL macros nest too deep") // a build defect, caught by tests
}

// expandOnce replaces the macro calls of s, and returns how many it
// replaced. A placeholder without arguments ({{table}}) is left as it is.
func expandOnce(s string, macros map[string]macro) (string, int) {
	var b strings.Builder
	n := 0
	for {
		i := strings.Index(s, "{{")
		if i < 0 {
			b.WriteString(s)
			return b.String(), n
		}
		j := i + 2
		for j < len(s) && (s[j] == '_' || 'a' <= s[j] && s[j] <= 'z' || '0' <= s[j] && s[j] <= '9') {
			j++
		}
		if j == i+2 || j == len(s) || s[j] != '(' {
			b.WriteString(s[:i+2])
			s = s[i+2:]
			continue
		}
		name := s[i+2 : j]
		m, ok := macros[name]
		if !ok {
			panic("store: the SQL calls an undefined macro " + name) // a build defect, caught by tests
		}
		args, end := splitArgs(s, j)
		if !strings.HasPrefix(s[end:], "}}") {
			panic("store: the SQL macro call " + s[i:end] + " is not closed by }}") // a build defect
		}
		b.WriteString(s[:i])
		b.WriteString(m(args))
		s = s[end+2:]
		n++
	}
}

// splitArgs reads the parenthesised argument list of a macro call that
// opens at s[open]: the arguments, split at the commas outside
// parentheses and quotes, and the index just after the closing
// parenthesis.
func splitArgs(s string, open int) ([]string, int) {
	var args []string
	depth, start := 0, open+1
	var quote byte
	for k := open; k < len(s); k++ {
		c := s[k]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				if arg := strings.TrimSpace(s[start:k]); arg != "" || len(args) > 0 {
					args = append(args, arg)
				}
				return args, k + 1
			}
		case c == ',' && depth == 1:
			args = append(args, strings.TrimSpace(s[start:k]))
			start = k + 1
		}
	}
	panic("store: an SQL macro call is not closed: " + s[open:]) // a build defect, caught by tests
}
