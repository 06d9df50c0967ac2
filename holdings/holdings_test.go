package holdings_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/holdings"
)

// A dropped-events snapshot replaces what was counted for its client only,
// and a client that holds nothing is forgotten.
func TestDroppedSnapshotReplacesOneClientsHoldings(t *testing.T) {
	tally := holdings.New()
	for _, e := range []pglease.Event{
		{Kind: pglease.EventAcquired, Client: "a", Name: "x"},
		{Kind: pglease.EventAcquired, Client: "b", Name: "x"},
		{Kind: pglease.EventElected, Client: "b", Name: "e"},
		{Kind: pglease.EventLeaderChanged, Client: "c", Name: "f"},
		{Kind: pglease.EventDropped, Client: "a", Held: []string{"y"}},
	} {
		tally.Observe(e)
	}
	if got, want := tally.Held(), map[string]int{"x": 1, "y": 1}; !maps.Equal(got, want) {
		t.Errorf("Held = %v, want %v", got, want)
	}
	if !tally.Holds("b", "x") || tally.Holds("a", "x") {
		t.Error("the snapshot of client a changed what b holds, or kept what a held")
	}
	if got, want := tally.Electors(), []string{"e", "f"}; !slices.Equal(got, want) {
		t.Errorf("Electors = %v, want %v", got, want)
	}
	tally.Observe(pglease.Event{Kind: pglease.EventReleased, Client: "a", Name: "y"})
	if got := tally.Clients(); got != 1 {
		t.Errorf("Clients = %d after client a released everything, want 1", got)
	}
	if got, want := tally.Names(), []string{"x", "y"}; !slices.Equal(got, want) {
		t.Errorf("Names = %v, want %v (every name ever held)", got, want)
	}
}
