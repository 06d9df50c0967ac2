//go:build unix

package cli_test

import (
	"strings"
	"testing"
)

// A run whose --slots differs from the slot count that a semaphore's live
// slots record (a plain run: 1) is pglease's own failure (125, not the conflict code: waiting
// would not end it), said in --slots terms; a NAME of the slot form is
// refused by run (125) but reaches a slot row through status.
func TestRunSlotsMismatchAndReservedSlotNames(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	holdLease(t, env, table, "pool", "--slots", "2")

	code, _, stderr := run(t, env, "run", "pool", "--table", table, "--slots", "3", "--wait", "--", "true")
	if code != 125 || !strings.Contains(stderr, "held as a semaphore of 2 slots") || !strings.Contains(stderr, "--slots 3") ||
		!strings.Contains(stderr, "same --slots") {
		t.Fatalf("run --slots 3 while 2 slots are held: exit %d, stderr %q; want 125 naming both counts and what to do", code, stderr)
	}
	// A name is one kind of lease: a plain run of a semaphore's name is
	// refused the same way.
	code, _, stderr = run(t, env, "run", "pool", "--table", table, "--wait", "--", "true")
	if code != 125 || !strings.Contains(stderr, "held as a semaphore of 2 slots") || !strings.Contains(stderr, "a plain lease") {
		t.Fatalf("a plain run while 2 slots are held: exit %d, stderr %q; want 125 naming both kinds", code, stderr)
	}
	if code, _, stderr := run(t, env, "run", "pool", "--table", table, "--slots", "2", "--", "true"); code != 0 {
		t.Fatalf("run --slots 2 with the same count: exit %d: %s", code, stderr)
	}

	code, _, stderr = run(t, env, "run", "pool#0", "--table", table, "--", "true")
	if code != 125 || !strings.Contains(stderr, "reserved for slot names") {
		t.Fatalf("run pool#0: exit %d, stderr %q; want 125, a name reserved for slot names", code, stderr)
	}

	var slot string
	for name, e := range lsJSON(t, env, table) {
		if strings.HasPrefix(name, "pool#") && e.State == "held" {
			slot = name
		}
	}
	if slot == "" {
		t.Fatalf("no held slot of pool in ls: %v", lsJSON(t, env, table))
	}
	if code, stdout, stderr := run(t, env, "status", slot, "--table", table); code != 0 || !strings.Contains(stdout, slot) {
		t.Fatalf("status %s: exit %d: %s%s", slot, code, stdout, stderr)
	}
}
