package cli

import (
	"context"
	"fmt"
	"strings"
)

// command is one entry of the command table. Main's dispatch, each
// command's flag parsing (env.parse), the help texts and every completion
// script come from the table, so that a command or a flag cannot be added
// to one and missed by the others.
type command struct {
	name    string
	aliases []string   // other names that run the command, e.g. list for ls
	args    string     // the arguments in the usage line, e.g. "NAME [flags] -- COMMAND [ARG...]"
	summary string     // one line, for 'pglease --help' and the completion menus
	flags   []flagSpec // the flags env.parse accepts for the command (--help is implicit)
	about   string     // help text between the usage line and the flag table
	more    string     // help text after the flag table: exit statuses, examples
	hidden  bool       // internal: not in help and completions
	run     func(e *env, ctx context.Context, args []string) int

	// For the completions:
	operand  string   // what the positional argument is, e.g. "lease name"; "" for none
	files    bool     // the positional argument is a file
	words    []string // the values the positional argument can take, if known
	dashdash bool     // a command line follows "--"
}

// commands is the command table; help.go fills it in init, because the
// handlers of help and completion refer back to it.
var commands []*command

// lookupCommand finds a command by name or alias.
func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
		for _, a := range c.aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

// visibleCommands are the commands that help and completions show.
func visibleCommands() []*command {
	var cs []*command
	for _, c := range commands {
		if !c.hidden {
			cs = append(cs, c)
		}
	}
	return cs
}

// visibleNames are the names and aliases of the visible commands.
func visibleNames() []string {
	var names []string
	for _, c := range visibleCommands() {
		names = append(names, c.name)
		names = append(names, c.aliases...)
	}
	return names
}

// invocation is "pglease NAME ARGS", as the command list shows it.
func (c *command) invocation() string {
	s := "pglease " + c.name
	if c.args != "" {
		s += " " + c.args
	}
	return s
}

// usageLine is what follows "Usage: " in the help of c.
func (c *command) usageLine() string {
	s := c.invocation()
	if len(c.flags) > 0 && !strings.Contains(c.args, "[flags]") {
		s += " [flags]"
	}
	return s
}

// help renders the help text of c.
func (c *command) help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s", c.usageLine(), c.about)
	if len(c.flags) > 0 {
		b.WriteString("\nFlags:\n" + flagHelp(c.flags))
	}
	if c.more != "" {
		b.WriteString("\n" + c.more)
	}
	return b.String()
}

// mainHelp renders 'pglease --help': the command list, then mainHelpTail.
func mainHelp() string {
	var b strings.Builder
	b.WriteString(mainHelpHead)
	var rows [][2]string
	for _, c := range visibleCommands() {
		rows = append(rows, [2]string{c.invocation(), c.summary})
	}
	b.WriteString(columns(rows, 3))
	b.WriteString(mainHelpTail)
	return b.String()
}

// helpFlag is the --help every command takes; parseFlags handles it.
var helpFlag = flagSpec{name: "help", kind: boolFlag, usage: "show help"}

// takesValue reports whether a flag consumes the next argument.
func (s flagSpec) takesValue() bool { return s.kind != boolFlag }
