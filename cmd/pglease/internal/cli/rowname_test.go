package cli

import (
	"strings"
	"testing"
)

// status, release and stepdown reach a semaphore's slot rows by their
// names (as pglease.Config.Plan lists them), which run refuses; a name no slot can have is
// refused by both, before anything connects.
func TestRowNamesAreLeaseNamesOrSlotNames(t *testing.T) {
	for _, tc := range []struct {
		name     string
		run, row bool // accepted by checkName, by checkRowName
	}{
		{"pool", true, true},
		{"#0", true, true}, // not a slot's: no semaphore name before '#'
		{"pool#0", false, true},
		{"pool#999", false, true},
		{"pool#1000", false, false}, // a semaphore has at most 1000 slots
		{"pool#007", false, false},  // not as pglease spells slot 7 (pool#7)
		{"-pool#0", false, false},
		{"po\x00ol#1", false, false},
		{strings.Repeat("n", 254) + "#1", false, false},
		{"", false, false},
	} {
		if got := checkName(tc.name) == nil; got != tc.run {
			t.Errorf("checkName(%q) accepted %v, want %v", tc.name, got, tc.run)
		}
		if got := checkRowName(tc.name) == nil; got != tc.row {
			t.Errorf("checkRowName(%q) accepted %v, want %v", tc.name, got, tc.row)
		}
	}
}
