package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A small flag parser: GNU-style "--name value" and "--name=value" (one dash
// works too), flags and positional arguments in any order, "--" ends the
// flags. The standard flag package stops at the first positional argument,
// which would make "pglease run NAME --ttl 5s -- cmd" impossible.

type flagKind int

const (
	boolFlag flagKind = iota
	stringFlag
	durationFlag
	intFlag
	listFlag // repeatable; the values are joined with commas
)

type flagSpec struct {
	name  string
	kind  flagKind
	arg   string // placeholder in help, e.g. "DURATION"
	usage string
}

// flagSet holds the result of parsing one command line.
type flagSet struct {
	specs    []flagSpec
	values   map[string]string
	args     []string // positional arguments
	rest     []string // everything after "--"
	dashdash bool     // "--" was present
	help     bool
}

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

func parseFlags(specs []flagSpec, args []string) (*flagSet, error) {
	fs := &flagSet{specs: specs, values: map[string]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			fs.dashdash = true
			fs.rest = args[i+1:]
			break
		}
		if len(a) < 2 || a[0] != '-' {
			fs.args = append(fs.args, a)
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		value, hasValue := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = k, v, true
		}
		if name == "h" || name == "help" {
			fs.help = true
			continue
		}
		spec, ok := fs.lookup(name)
		if !ok {
			return fs, usagef("unknown flag %s", quoteArg(a))
		}
		switch {
		case spec.kind == boolFlag && !hasValue:
			value = "true"
		case spec.kind == boolFlag:
			if _, err := strconv.ParseBool(value); err != nil {
				return fs, usagef("flag --%s takes no value or true/false, got %s", name, quoteArg(value))
			}
		case !hasValue:
			if i+1 >= len(args) {
				return fs, usagef("flag --%s needs a value (%s)", name, spec.arg)
			}
			i++
			value = args[i]
		}
		switch spec.kind {
		case durationFlag:
			if _, err := time.ParseDuration(value); err != nil {
				return fs, usagef("flag --%s: %s is not a duration (examples: 30s, 2m, 1h30m)", name, quoteArg(value))
			}
		case intFlag:
			if _, err := strconv.Atoi(value); err != nil {
				return fs, usagef("flag --%s: %s is not a whole number", name, quoteArg(value))
			}
		}
		if prev, ok := fs.values[name]; ok && spec.kind == listFlag {
			value = prev + "," + value
		}
		fs.values[name] = value
	}
	return fs, nil
}

func (fs *flagSet) lookup(name string) (flagSpec, bool) {
	for _, s := range fs.specs {
		if s.name == name {
			return s, true
		}
	}
	return flagSpec{}, false
}

func (fs *flagSet) isSet(name string) bool { _, ok := fs.values[name]; return ok }

func (fs *flagSet) str(name string) string { return fs.values[name] }

// list returns the values of a listFlag: each use, split at commas, with
// the spaces around them removed.
func (fs *flagSet) list(name string) []string {
	v, ok := fs.values[name]
	if !ok {
		return nil
	}
	out := strings.Split(v, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

func (fs *flagSet) boolean(name string) bool {
	b, _ := strconv.ParseBool(fs.values[name])
	return b
}

func (fs *flagSet) duration(name string, def time.Duration) time.Duration {
	v, ok := fs.values[name]
	if !ok {
		return def
	}
	d, _ := time.ParseDuration(v)
	return d
}

func (fs *flagSet) integer(name string, def int) int {
	v, ok := fs.values[name]
	if !ok {
		return def
	}
	n, _ := strconv.Atoi(v)
	return n
}

// flagHelp renders the flag table of a help text.
func flagHelp(specs []flagSpec) string {
	rows := make([][2]string, len(specs))
	for i, s := range specs {
		rows[i] = [2]string{"--" + s.name, s.usage}
		if s.arg != "" {
			rows[i][0] += " " + s.arg
		}
	}
	return columns(rows, 2)
}

// columns renders rows of two columns, indented by two spaces, the second
// column aligned gap spaces after the widest first one.
func columns(rows [][2]string, gap int) string {
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-*s%*s%s\n", width, r[0], gap, "", r[1])
	}
	return b.String()
}

// quoteArg shows a command-line argument safely: control characters and
// overlong values are escaped or shortened.
func quoteArg(s string) string {
	const limit = 64
	if len(s) > limit {
		s = s[:limit] + "…"
	}
	q := strconv.Quote(s)
	if s != "" && q[1:len(q)-1] == s && !strings.ContainsAny(s, " \t'") {
		return s
	}
	return q
}
