package store

import "strings"

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
var fragmentMacros = map[string][]string{"Head": {"name"}}

// sqlMacros are the macros the embedded files may call: the fragments
// that take arguments (fragmentMacros).
func sqlMacros(stmts map[string]string) map[string]macro {
	macros := map[string]macro{}
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
