package cli

import "github.com/jackc/pgx/v5/pgconn"

// Exports for the tests of package cli_test.

// VersionLine is versionLine.
var VersionLine = versionLine

// TestCommand is what the tests know of an entry of the command table.
type TestCommand struct {
	Name, Summary string
	Aliases       []string
	Flags         []TestFlag
	Hidden        bool
	Words         []string // the completions of the positional argument
	Files         bool     // the positional argument is a file
	DashDash      bool
}

// TestFlag is a flag of a TestCommand.
type TestFlag struct {
	Name, Usage string
	TakesValue  bool
}

// CommandTable returns the command table.
func CommandTable() []TestCommand {
	var cs []TestCommand
	for _, c := range commands {
		tc := TestCommand{Name: c.name, Summary: c.summary, Aliases: c.aliases, Hidden: c.hidden, Words: c.words, Files: c.files, DashDash: c.dashdash}
		for _, f := range c.flags {
			tc.Flags = append(tc.Flags, TestFlag{Name: f.name, Usage: f.usage, TakesValue: f.takesValue()})
		}
		cs = append(cs, tc)
	}
	return cs
}

// Patience is patience: the tests of both packages wait as long.
const Patience = patience

// WaitFor is waitFor: the tests of both packages poll with it.
var WaitFor = waitFor

// BaseEnv is withoutConnectionVars: the tests keep the developer's own
// database away from the processes they start, as the demo does.
var BaseEnv = withoutConnectionVars

// ServerOf is what the messages call the server and database dsn leads to
// (describeServer).
func ServerOf(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "(invalid DSN: " + err.Error() + ")"
	}
	return describeServer(cfg)
}
