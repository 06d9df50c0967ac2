// Package cli implements the pglease command-line tool. Main takes the
// arguments, stdout and stderr and returns the exit status, so that the tool
// can be tested in-process; cmd/pglease only calls it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// Exit statuses of the tool (see docs/CLI.md).
const (
	exitOK       = 0
	exitError    = 1  // database unreachable or refusing us, other errors
	exitUsage    = 2  // bad flags, names, durations, identifiers, DSN
	exitFree     = 3  // status: the lease is not held
	exitHeld     = 75 // the lease was seen held by another owner
	exitLost     = 76 // the lease was lost while the command ran
	exitNoExec   = 126
	exitNotFound = 127
)

// env is what a command may use of the outside world.
type env struct {
	stdout io.Writer
	// stderr takes pglease's own messages: a diagWriter, whose Write never
	// blocks, so that no message can delay what pglease does next.
	stderr io.Writer
	// errOut is the process's stderr itself, for the commands pglease
	// starts to inherit.
	errOut  io.Writer
	getenv  func(string) string
	secrets []string // passwords to redact from every message
	// server says where the connection settings lead, for messages:
	// "database D on HOST:PORT as USER" (checkDSN); dsnFrom is where
	// they came from: "--dsn", "$PGLEASE_DSN", "$DATABASE_URL" or ""
	// (libpq's PG* variables and defaults; resolveDSN).
	server, dsnFrom string
	renewals        renewals // wakes the guards of running commands
}

// Main runs the tool with args (without the program name) and returns the
// exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	errOut := lockedWriter(stderr) // also written by the commands' copiers (in-process)
	diag := newDiagWriter(errOut)
	e := &env{stdout: stdout, stderr: diag, errOut: errOut, getenv: os.Getenv}
	// The messages still queued get a moment to go out before the exit; a
	// blocked stderr delays it no longer than that. The supervisor's exit
	// lets pglease release the lease, so it waits less.
	flush := time.Second
	defer func() { diag.close(flush) }()
	if len(args) == 0 {
		fmt.Fprint(e.stderr, mainHelp())
		return exitUsage
	}
	name, rest := args[0], args[1:]
	if name == superviseCmd {
		flush = 250 * time.Millisecond
	}
	switch name {
	case "-h", "--help", "-help":
		name = "help"
	case "--version", "-version":
		name = "version"
	}
	if c := lookupCommand(name); c != nil {
		return c.run(e, ctx, rest)
	}
	return e.usage("", usagef("unknown command %s", quoteArg(name)))
}

// usage reports a usage error of command cmd and returns exit status 2.
func (e *env) usage(cmd string, err error) int {
	fmt.Fprintf(e.stderr, "pglease: %s\n", e.redact(err.Error()))
	if cmd == "" {
		fmt.Fprintln(e.stderr, "Run 'pglease --help' for usage.")
	} else {
		fmt.Fprintf(e.stderr, "Run 'pglease %s --help' for usage.\n", cmd)
	}
	return exitUsage
}

// fail reports an error (passwords redacted) and returns exit status 1.
func (e *env) fail(err error) int {
	msg := e.redact(err.Error())
	if !strings.HasPrefix(msg, "pglease: ") {
		msg = "pglease: " + msg
	}
	fmt.Fprintln(e.stderr, msg)
	if errors.Is(err, pglease.ErrSchema) {
		// The library names admin.Migrate; here the tool's command does it.
		fmt.Fprintln(e.stderr, "pglease: 'pglease migrate', run as a role that owns the table, upgrades or repairs a table pglease created; it changes nothing in a table of another layout.")
	}
	return exitError
}

// parse parses args with the flags the command table declares for cmd, so
// that a command parses exactly the flags its help and completions show;
// it prints the help when asked for. done reports that the command should
// return code at once.
func (e *env) parse(cmd string, args []string) (fs *flagSet, code int, done bool) {
	c := lookupCommand(cmd)
	fs, err := parseFlags(c.flags, args)
	if fs != nil && fs.help {
		fmt.Fprint(e.stdout, c.help())
		return fs, exitOK, true
	}
	if err != nil {
		return fs, e.usage(cmd, err), true
	}
	return fs, 0, false
}

// checkTable validates a --table value without connecting.
func checkTable(table string) error {
	if _, err := admin.DDL(table); err != nil {
		return usagef("invalid --table %s: each part of [SCHEMA.]TABLE must match [a-z_][a-z0-9_]{0,62}", quoteArg(table))
	}
	return nil
}

// checkName validates a lease name that run acquires, without connecting.
func checkName(name string) error {
	if strings.HasPrefix(name, "-") {
		return usagef("invalid lease name %s: it must not start with '-'", quoteArg(name))
	}
	if _, err := (pglease.Config{}).Plan(name); err != nil {
		return usagef("invalid lease name %s: %s", quoteArg(name), reason(err))
	}
	return nil
}

// checkRowName validates the NAME of a command that reads or deletes a
// lease row (status, release, stepdown), without connecting: a lease name,
// or one of the slot names that pglease.Config.Plan gives a semaphore
// ("pool#3" is one of those of "pool" with 4 slots or more), which run
// refuses as a lease name but these commands reach.
func checkRowName(name string) error {
	err := checkName(name)
	if err == nil {
		return nil
	}
	if i := strings.LastIndexByte(name, '#'); i > 0 && !strings.HasPrefix(name, "-") {
		if slot, serr := strconv.Atoi(name[i+1:]); serr == nil && slot >= 0 {
			p, perr := (pglease.Config{}).Plan(name[:i], pglease.WithSlots(max(slot+1, 2)))
			if perr == nil && slices.Contains(p.Names, name) {
				return nil
			}
		}
	}
	return err
}

// reason is what the library says is wrong with a value it refused (an
// *pglease.InvalidError's Reason), for a message that names the value in
// the tool's own words.
func reason(err error) string {
	var ie *pglease.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}

var connFlags = []flagSpec{
	{name: "dsn", kind: stringFlag, arg: "DSN", usage: "connection string (default $PGLEASE_DSN, $DATABASE_URL, then the PG* variables)"},
	{name: "table", kind: stringFlag, arg: "[SCHEMA.]TABLE", usage: "lease table (default pglease_leases)"},
}

func (e *env) cmdVersion(args []string) int {
	fs, code, done := e.parse("version", args)
	if done {
		return code
	}
	if err := noArgs(fs); err != nil {
		return e.usage("version", err)
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(e.stdout, versionLine(bi))
	return exitOK
}

func (e *env) cmdHelp(args []string) int {
	fs, code, done := e.parse("help", args)
	if done {
		return code
	}
	words := append(fs.args, fs.rest...)
	switch {
	case len(words) == 0:
		fmt.Fprint(e.stdout, mainHelp())
	case len(words) > 1:
		return e.usage("help", usagef("help takes one COMMAND, got %d arguments", len(words)))
	default:
		c := lookupCommand(words[0])
		if c == nil || c.hidden {
			return e.usage("help", usagef("unknown command %s", quoteArg(words[0])))
		}
		fmt.Fprint(e.stdout, c.help())
	}
	return exitOK
}

func (e *env) cmdCompletion(args []string) int {
	fs, code, done := e.parse("completion", args)
	if done {
		return code
	}
	words := append(fs.args, fs.rest...)
	if len(words) != 1 {
		return e.usage("completion", usagef("completion needs one shell: %s", shellsInWords()))
	}
	script, ok := completionScript(words[0])
	if !ok {
		return e.usage("completion", usagef("unsupported shell %s: use %s", quoteArg(words[0]), shellsInWords()))
	}
	fmt.Fprint(e.stdout, script)
	return exitOK
}
