package cli

import "testing"

// TestTableReferencesFlagVars: the table holds the flag vars the commands
// parse, not copies, so that a flag added to one of them is in the help and
// in every completion script.
func TestTableReferencesFlagVars(t *testing.T) {
	for name, specs := range map[string][]flagSpec{
		"run": runFlags, "ls": lsFlags, "status": statusFlags, "release": releaseFlags,
		"migrate": connFlags, "schema": schemaFlags, "cleanup": connFlags, "demo": demoFlags,
	} {
		c := lookupCommand(name)
		if c == nil {
			t.Errorf("%s is not in the table", name)
			continue
		}
		if len(c.flags) != len(specs) || len(specs) > 0 && &c.flags[0] != &specs[0] {
			t.Errorf("%s: the table's flags are not the flag var the command parses", name)
		}
	}
	for _, c := range commands {
		if c.run == nil {
			t.Errorf("%s has no handler", c.name)
		}
		if !c.hidden && (c.summary == "" || c.about == "" || c.more == "") {
			t.Errorf("%s: summary, help text or examples missing", c.name)
		}
	}
}
