//go:build unix

package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// recipe is a pglease run command line found in a fenced block of a doc.
type recipe struct {
	where string   // file:line
	args  []string // after "pglease"
}

// docRecipes extracts every "pglease run" command line from the fenced
// code blocks of a Markdown file: shell and cron lines, systemd ExecStart=
// lines and YAML command arrays.
func docRecipes(t *testing.T, path string) []recipe {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []recipe
	fenced := false
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			continue
		}
		where := filepath.Base(path) + ":" + strconv.Itoa(i+1)
		if j := strings.Index(line, `command: ["pglease", "run"`); j >= 0 {
			// A YAML flow sequence, possibly over several lines: JSON.
			arr := line[j+len("command: "):]
			for !strings.Contains(arr, "]") && i+1 < len(lines) {
				i++
				arr += " " + strings.TrimSpace(lines[i])
			}
			var words []string
			if err := json.Unmarshal([]byte(arr), &words); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			out = append(out, recipe{where, words[1:]})
			continue
		}
		m := pgleaseRun.FindStringIndex(line)
		if m == nil {
			continue
		}
		words := shellWords(t, where, line[m[0]:])
		out = append(out, recipe{where, words[1:]})
	}
	return out
}

var pgleaseRun = regexp.MustCompile(`(/usr/local/bin/)?pglease run `)

// shellWords splits a command line as sh would, for the quoting the docs
// use (double quotes, no escapes), dropping a trailing # comment.
func shellWords(t *testing.T, where, s string) []string {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case !quoted && r == '#' && !inWord:
			return append(words, cur.String())[:len(words)]
		case !quoted && (r == ' ' || r == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("%s: unbalanced quotes", where)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// Every pglease run recipe in the README and docs/CLI.md is accepted as
// written and behaves as its text says when two hosts run it one after the
// other: a recipe with --min-hold runs the job once (the second host gets
// the conflict code), the others run it twice.
func TestRunRecipesInDocsWork(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	var recipes []recipe
	for _, f := range []string{"../../../../README.md", "../../../../docs/CLI.md"} {
		recipes = append(recipes, docRecipes(t, f)...)
	}
	if len(recipes) < 8 {
		t.Fatalf("found only %d recipes: the extraction is broken", len(recipes))
	}
	host := strings.NewReplacer("%H", "host-a", "$POD_NAME", "pod-a", "$(POD_NAME)", "pod-a")
	for i, r := range recipes {
		dash := slices.Index(r.args, "--")
		if r.args[0] != "run" || dash < 0 {
			t.Fatalf("%s: not a run command line: %q", r.where, r.args)
		}
		var flags []string
		for _, a := range r.args[1:dash] {
			flags = append(flags, host.Replace(a))
		}
		// Each recipe gets a lease of its own; its COMMAND is replaced by
		// one that records that it ran.
		n := nameIndex(flags)
		if n < 0 {
			t.Fatalf("%s: no lease NAME in %q", r.where, r.args)
		}
		flags[n] = "recipe-" + strconv.Itoa(i)
		ran := filepath.Join(t.TempDir(), "ran")
		args := append(append([]string{"run", "--table", table}, flags...), "--", "sh", "-c", "echo x >> "+ran)
		for try := 0; try < 2; try++ {
			code, _, stderr := run(t, env, args...)
			b, _ := os.ReadFile(ran)
			times := strings.Count(string(b), "x")
			want, wantTimes := 0, try+1
			if try == 1 && slices.Contains(flags, "--min-hold") {
				want, wantTimes = 75, 1
				if j := slices.Index(flags, "--conflict-exit-code"); j >= 0 {
					want, _ = strconv.Atoi(flags[j+1])
				}
			}
			if code != want || times != wantTimes {
				t.Errorf("%s: %q, run %d: exit %d and the job ran %d times, want %d and %d\n%s", r.where, r.args, try+1, code, times, want, wantTimes, stderr)
			}
		}
	}
}

// nameIndex is the index of the lease NAME among the words before "--" of
// a run command line: the first that is neither a flag nor a flag's value.
func nameIndex(words []string) int {
	boolFlags := []string{"--wait", "--fast-failover"}
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case !strings.HasPrefix(w, "-"):
			return i
		case !strings.Contains(w, "=") && !slices.Contains(boolFlags, w):
			i++ // its value
		}
	}
	return -1
}
