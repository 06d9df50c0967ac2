package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/cmd/pglease/internal/cli"
)

var shellNames = []string{"bash", "zsh", "fish"}

// completionScript returns the output of 'pglease completion shell'.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	code, stdout, stderr := mainInProcess(t, "completion", shell)
	if code != 0 || stderr != "" {
		t.Fatalf("completion %s: exit %d, stderr %q", shell, code, stderr)
	}
	return stdout
}

// visible are the commands of the table that help and completions show.
func visible() []cli.TestCommand {
	var cs []cli.TestCommand
	for _, c := range cli.CommandTable() {
		if !c.Hidden {
			cs = append(cs, c)
		}
	}
	return cs
}

// section is the part of script from the first line equal to start up to
// the next line equal to end.
func section(t *testing.T, script, start, end string) string {
	t.Helper()
	lines := strings.Split(script, "\n")
	i := slices.Index(lines, start)
	if i < 0 {
		t.Fatalf("no line %q in the script", start)
	}
	j := slices.Index(lines[i+1:], end)
	if j < 0 {
		t.Fatalf("no line %q after %q", end, start)
	}
	return strings.Join(lines[i:i+1+j], "\n")
}

// names is the name and the aliases of c.
func names(c cli.TestCommand) []string { return append([]string{c.Name}, c.Aliases...) }

// TestCompletionCoversTable: every visible command, alias and flag of the
// table is in every shell's script, in the part for its command.
func TestCompletionCoversTable(t *testing.T) {
	safe := regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	table := cli.CommandTable()
	if len(visible()) < 10 {
		t.Fatalf("the table has only %d visible commands", len(visible()))
	}
	for _, c := range table {
		for _, n := range names(c) {
			if !c.Hidden && !safe.MatchString(n) {
				t.Errorf("command name %q would need quoting in the scripts", n)
			}
		}
		for _, f := range c.Flags {
			if !safe.MatchString(f.Name) {
				t.Errorf("%s: flag name %q would need quoting in the scripts", c.Name, f.Name)
			}
		}
	}
	bash, zsh, fish := completionScript(t, "bash"), completionScript(t, "zsh"), completionScript(t, "fish")
	for _, c := range visible() {
		t.Run(c.Name, func(t *testing.T) {
			alts := strings.Join(names(c), "|")
			b := section(t, bash, "    "+alts+")", "        ;;")
			z := section(t, zsh, "    ("+alts+")", "        ;;")
			for _, n := range names(c) {
				if !regexp.MustCompile(`compgen -W '[^']*\b` + n + `\b`).MatchString(bash) {
					t.Errorf("bash: command %s is not completed", n)
				}
				if !strings.Contains(zsh, "        '"+n+":"+strings.ReplaceAll(c.Summary, "'", `'\''`)+"'\n") {
					t.Errorf("zsh: command %s is not completed with its summary", n)
				}
				if !strings.Contains(fish, "-a '"+n+"' -d '"+strings.ReplaceAll(c.Summary, "'", `\'`)+"'\n") {
					t.Errorf("fish: command %s is not completed with its summary", n)
				}
			}
			fishCond := "complete -c pglease -n '__pglease_using " + strings.Join(names(c), " ") + "'"
			for _, f := range append(c.Flags, cli.TestFlag{Name: "help"}) {
				if !regexp.MustCompile(`compgen -W '[^']*--` + f.Name + `\b`).MatchString(b) {
					t.Errorf("bash: %s --%s is not completed", c.Name, f.Name)
				}
				if f.TakesValue && !strings.Contains(b, "|--"+f.Name+"|") && !strings.Contains(b, "|--"+f.Name+")") {
					t.Errorf("bash: %s --%s takes a value but flags are completed after it", c.Name, f.Name)
				}
				zspec := "'--" + f.Name + "["
				if f.TakesValue {
					zspec = "'--" + f.Name + "=["
				}
				if !strings.Contains(z, zspec) {
					t.Errorf("zsh: %s --%s is not completed (no %s)", c.Name, f.Name, zspec)
				}
				fl := fishCond + " -l " + f.Name
				if f.TakesValue {
					fl += " -x"
				}
				if !strings.Contains(fish, fl+" -d ") && !strings.Contains(fish, fl+" -s h -d ") {
					t.Errorf("fish: %s --%s is not completed (no %s)", c.Name, f.Name, fl)
				}
			}
			for _, w := range c.Words {
				for shell, script := range map[string]string{"bash": b, "zsh": z, "fish": fish} {
					if !regexp.MustCompile(`\b` + regexp.QuoteMeta(w) + `\b`).MatchString(script) {
						t.Errorf("%s: %s does not complete %s", shell, c.Name, w)
					}
				}
			}
			if c.DashDash {
				if !strings.Contains(bash, "_pglease_command") || !strings.Contains(z, "_normal") ||
					!strings.Contains(fish, "-n '__pglease_after_dashdash "+strings.Join(names(c), " ")+"' -a '(__pglease_complete_command)'") {
					t.Errorf("%s: a command line after -- is not completed in every shell", c.Name)
				}
			}
		})
	}
}

// TestCompletionHidesInternalCommands: the internal commands stay out of the
// scripts and of the help.
func TestCompletionHidesInternalCommands(t *testing.T) {
	var hidden []string
	for _, c := range cli.CommandTable() {
		if c.Hidden {
			hidden = append(hidden, c.Name)
		}
	}
	if !slices.Contains(hidden, "__supervise") || !slices.Contains(hidden, "__demo-job") {
		t.Fatalf("hidden commands %v: the internal commands are not in the table", hidden)
	}
	_, help, _ := mainInProcess(t, "--help")
	texts := map[string]string{"help": help}
	for _, sh := range shellNames {
		texts[sh] = completionScript(t, sh)
	}
	for what, text := range texts {
		for _, h := range hidden {
			if strings.Contains(text, h) {
				t.Errorf("%s mentions %s", what, h)
			}
		}
	}
}

// TestCompletionScriptsParse runs each installed shell's syntax check on its
// script.
func TestCompletionScriptsParse(t *testing.T) {
	checks := map[string][]string{"bash": {"-n"}, "zsh": {"-n"}, "fish": {"--no-execute"}}
	for _, sh := range shellNames {
		t.Run(sh, func(t *testing.T) {
			path := shellPath(t, sh)
			file := filepath.Join(t.TempDir(), "pglease."+sh)
			if err := os.WriteFile(file, []byte(completionScript(t, sh)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(path, append(checks[sh], file)...).CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Errorf("%s %v: %v\n%s", sh, checks[sh], err, out)
			}
		})
	}
}

// shellPath finds shell or skips the test.
func shellPath(t *testing.T, shell string) string {
	t.Helper()
	path, err := exec.LookPath(shell)
	if err != nil {
		t.Skipf("%s is not installed", shell)
	}
	return path
}

// completionCases are command lines (the last word is being completed)
// and completions they must offer (want) or must not (not).
var completionCases = []struct {
	line      string
	want, not []string
}{
	{"pglease ", []string{"run", "ls", "completion"}, []string{"__supervise", "__demo-job"}},
	{"pglease demo --h", []string{"--hold", "--help"}, nil},
	{"pglease run x --fast", []string{"--fast-failover"}, nil},
	{"pglease run --t", []string{"--ttl", "--timeout", "--table"}, []string{"--wait"}},
	{"pglease run --ttl ", nil, []string{"--wait", "--dsn"}},
	{"pglease list --j", []string{"--json"}, nil},
	{"pglease completion ", []string{"bash", "zsh", "fish"}, nil},
	{"pglease run x -- ech", []string{"echo"}, []string{"--ttl"}},
	{"pglease release --force -- --", nil, []string{"--force", "--dsn"}},
	{"pglease cron /etc/passw", []string{"/etc/passwd"}, nil},
	{"pglease cron --mi", []string{"--missed"}, []string{"/etc/passwd"}},
	{"pglease jobs --l", []string{"--limit"}, nil},
}

// TestCompletionBash calls _pglease as bash would.
func TestCompletionBash(t *testing.T) {
	bash := shellPath(t, "bash")
	script := filepath.Join(t.TempDir(), "pglease.bash")
	if err := os.WriteFile(script, []byte(completionScript(t, "bash")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range completionCases {
		words := strings.Split(tc.line, " ")
		// COMP_WORDS=(words...); COMP_CWORD=last; _pglease
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c",
			`source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _pglease; printf '%s\n' "${COMPREPLY[@]}"`,
			"bash", script)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		checkCompletions(t, "bash", tc.line, strings.Fields(string(out)), tc.want, tc.not)
	}
}

// TestCompletionFish asks fish for the completions of each command line.
func TestCompletionFish(t *testing.T) {
	fish := shellPath(t, "fish")
	dir := t.TempDir()
	script := filepath.Join(dir, "pglease.fish")
	if err := os.WriteFile(script, []byte(completionScript(t, "fish")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range completionCases {
		cmd := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, tc.line)
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CACHE_HOME="+dir)
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			got = append(got, strings.Split(l, "\t")[0])
		}
		checkCompletions(t, "fish", tc.line, got, tc.want, tc.not)
	}
}

// zshCapture prints the completions zsh offers for a command line: it runs
// an interactive zsh in a pseudo-terminal (zsh/zpty), loads compinit and the
// script, types the line and a tab, and prints what compadd is given.
// After zsh-capture-completion by Valodim (MIT).
const zshCapture = `zmodload zsh/zpty
zpty z zsh -f -i
local line
setopt rcquotes
() {
    zpty -w z source $1
    repeat 4; do
        zpty -r z line
        [[ $line == ok* ]] && return
    done
    echo 'error initializing.' >&2
    exit 2
} =( <<< '
PROMPT=
autoload compinit
compinit -u -D
bindkey ''^M'' undefined
bindkey ''^J'' undefined
bindkey ''^I'' complete-word
null-line () { echo -E - $''\0'' }
compprefuncs=( null-line )
comppostfuncs=( null-line exit )
zstyle '':completion:*'' list-grouped false
zstyle '':completion:*'' insert-tab false
zstyle '':completion:*'' list-separator ''''
compadd () {
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
        builtin compadd "$@"
        return $?
    fi
    typeset -a __hits __dscr
    builtin compadd -A __hits -D __dscr "$@"
    setopt localoptions norcexpandparam extendedglob
    typeset -A apre hpre hsuf asuf
    zparseopts -E P:=apre p:=hpre S:=asuf s:=hsuf
    [[ -n $__hits ]] || return
    for i in {1..$#__hits}; do
        echo -E - $IPREFIX$apre$hpre$__hits[$i]$hsuf$asuf
    done
}
source '"$2"'
echo ok')
zpty -w z "$3"$'\t'
integer tog=0
while zpty -r z; do :; done | while IFS= read -r line; do
    if [[ $line == *$'\0\r' ]]; then
        (( tog++ )) && return 0 || continue
    fi
    (( tog )) && echo -E - $line
done
return 2
`

// TestCompletionZsh asks an interactive zsh for the completions of each
// command line.
func TestCompletionZsh(t *testing.T) {
	zsh := shellPath(t, "zsh")
	if exec.Command(zsh, "-fc", "zmodload zsh/zpty").Run() != nil {
		t.Skip("zsh has no zsh/zpty module")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "_pglease")
	if err := os.WriteFile(script, []byte(completionScript(t, "zsh")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range completionCases {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, zsh, "-fc", zshCapture, "zsh", "", script, tc.line)
		cmd.Env = append(os.Environ(), "HOME="+dir, "ZDOTDIR="+dir)
		cmd.Dir = dir
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Errorf("%q: %v\n%s", tc.line, err, out)
			continue
		}
		var got []string
		for _, l := range strings.Split(string(out), "\n") {
			if l = strings.TrimRight(l, "\r"); l != "" {
				got = append(got, l)
			}
		}
		checkCompletions(t, "zsh", tc.line, got, tc.want, tc.not)
	}
}

func checkCompletions(t *testing.T, shell, line string, got, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s: %q completes to %q, without %s", shell, line, got, w)
		}
	}
	for _, n := range not {
		if slices.Contains(got, n) {
			t.Errorf("%s: %q completes to %q, with %s", shell, line, got, n)
		}
	}
}

// TestHelpCoversTable: every visible command is in 'pglease --help', and
// its help (as 'help CMD', 'CMD --help' and under each alias) lists each of
// its flags.
func TestHelpCoversTable(t *testing.T) {
	_, mainHelp, _ := mainInProcess(t, "--help")
	for _, c := range visible() {
		if !strings.Contains(mainHelp, "\n  pglease "+c.Name+" ") || !strings.Contains(mainHelp, c.Summary+"\n") {
			t.Errorf("pglease --help does not list %s with its summary", c.Name)
		}
		code, want, stderr := mainInProcess(t, "help", c.Name)
		if code != 0 || stderr != "" || !strings.HasPrefix(want, "Usage: pglease "+c.Name) {
			t.Errorf("help %s: exit %d, stdout %q, stderr %q", c.Name, code, want, stderr)
		}
		for _, f := range c.Flags {
			if !regexp.MustCompile(`(?m)^  --` + f.Name + `\b.*  ` + regexp.QuoteMeta(f.Usage) + `$`).MatchString(want) {
				t.Errorf("help %s does not describe --%s", c.Name, f.Name)
			}
		}
		for _, n := range names(c) {
			if _, got, _ := mainInProcess(t, n, "--help"); got != want {
				t.Errorf("%s --help differs from help %s", n, c.Name)
			}
			if _, got, _ := mainInProcess(t, "help", n); got != want {
				t.Errorf("help %s differs from help %s", n, c.Name)
			}
		}
	}
}
