package main

import (
	"errors"
	"slices"
	"testing"
)

func TestParseInts(t *testing.T) {
	got, err := parseInts(" 10,100 ,1000")
	if err != nil || !slices.Equal(got, []int{10, 100, 1000}) {
		t.Errorf("parseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "10,", "-1", "ten"} {
		if got, err := parseInts(bad); err == nil {
			t.Errorf("parseInts(%q) = %v, want an error", bad, got)
		}
	}
}

func TestParseHoldings(t *testing.T) {
	got, err := parseHoldings("shared, waited,shared")
	if err != nil || !slices.Equal(got, []string{holdShared, holdWaited}) {
		t.Errorf("parseHoldings = %v, %v", got, err)
	}
	if got, err := parseHoldings("waited,blocked"); err == nil {
		t.Errorf("parseHoldings(blocked) = %v, want an error", got)
	}
}

func TestHoldingsFor(t *testing.T) {
	all := []string{holdWaited, holdTried, holdFF, holdShared}
	for _, c := range []struct {
		id       string
		selected []string
		want     []string
	}{
		{"pglease", all, all},
		{"pglease-ff", all, []string{holdWaited, holdTried, holdShared}},
		{"pglease-ff", []string{holdFF}, []string{holdFF}},
		{"advisory", []string{holdTried, holdShared}, []string{holdWaited}},
	} {
		if got := holdingsFor(c.id, c.selected); !slices.Equal(got, c.want) {
			t.Errorf("holdingsFor(%s, %v) = %v, want %v", c.id, c.selected, got, c.want)
		}
	}
	if !slices.Equal(all, []string{holdWaited, holdTried, holdFF, holdShared}) {
		t.Errorf("holdingsFor changed its argument: %v", all)
	}
}

func TestFleetSpecs(t *testing.T) {
	for _, c := range []struct{ n, procs int }{{10, 1}, {200, 1}, {201, 2}, {1000, 5}, {5000, 10}} {
		specs := fleetSpecs(roleWaiters, c.n, fleetTable, "p-")
		if len(specs) != c.procs {
			t.Errorf("%d clients: %d children, want %d", c.n, len(specs), c.procs)
		}
		next := 0
		for _, s := range specs {
			if s.First != next || s.Role != roleWaiters || s.Table != fleetTable || s.Prefix != "p-" {
				t.Errorf("%d clients: spec %+v, want first %d", c.n, s, next)
			}
			next += s.Clients
		}
		if next != c.n {
			t.Errorf("%d clients: the specs have %d", c.n, next)
		}
	}
}

func TestFleetRow(t *testing.T) {
	r := fleetRow{role: "waiters", clients: 1000, holder: 3, conns: 1103}
	if got := r.perClient(); got != 1.1 {
		t.Errorf("perClient = %v, want 1.1", got)
	}
	if !r.fits() {
		t.Errorf("%d connections for 1000 clients: want them to fit 1.1 N + 10", r.conns)
	}
	r.conns = 1111
	if r.fits() {
		t.Errorf("%d connections for 1000 clients: want them not to fit 1.1 N + 10", r.conns)
	}
}

func TestMarkdownS7AndFleet(t *testing.T) {
	p := peerByID
	r := &report{cfg: quickConfig(), fleetMaxConns: 3100,
		s7: []s7Row{
			{peer: p("pglease"), holding: holdTried, others: 0, conns: 2, lat: msDurs(2)},
			{peer: p("pglease"), holding: holdTried, others: 5, conns: 17, lat: msDurs(3), retried: 2},
			{peer: p("pglease"), holding: holdShared, others: 0, conns: -1, lat: msDurs(2)},
			{peer: p("pglease"), holding: holdShared, others: 5, conns: 12, err: errors.New("boom")},
		},
		fleet: []fleetRow{
			{role: "electors", clients: 10, procs: 1, conns: 29, settled: true, retried: 2},
			{role: "waiters", clients: 1000, procs: 5, holder: 3, conns: 1013, settled: true},
			{role: "waiters", clients: 100, procs: 1, err: errors.New("too many clients")},
		},
	}
	wantLines(t, r.markdown(),
		"| pglease | tried | 0 | 1 | 2.0 | 2.0 | 2.0 | 2.0 | 1.00× | 0 | 2 | – |",
		"| pglease | tried | 5 | 1 | 3.0 | 3.0 | 3.0 | 3.0 | 1.50× | 0 | 17 | 3.00 |",
		"| pglease | shared | 0 | 1 | 2.0 | 2.0 | 2.0 | 2.0 | 1.00× | 0 | – | – |",
		"| pglease | shared | 5 | 0 | | | | | | error: boom | 12 | – |",
		"Waiting clients' Opens or waits that failed and were retried: pglease, tried, 5 others: 2.",
		"| 10 | electors | 1 | 0.0 | 29 | – | 2.90 | yes | 2 | no |",
		"| 1000 | waiters | 5 | 0.0 | 1013 | 3 | 1.01 | yes | 0 | yes |",
		"| 100 | waiters | 1 | | | | | | | error: too many clients |",
	)
}
