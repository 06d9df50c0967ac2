package cli

import "testing"

// TestTableEntriesAreComplete: every command has a handler, and every
// visible one the texts that its help and the completion menus show. (A
// command's flags need no check: parse takes them from the table.)
func TestTableEntriesAreComplete(t *testing.T) {
	for _, c := range commands {
		if c.run == nil {
			t.Errorf("%s has no handler", c.name)
		}
		if !c.hidden && (c.summary == "" || c.about == "" || c.more == "") {
			t.Errorf("%s: summary, help text or examples missing", c.name)
		}
	}
}
