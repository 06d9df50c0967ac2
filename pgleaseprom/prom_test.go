package pgleaseprom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pglease/pglease"
)

func TestObserverCountsEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := New(reg, Options{NameLabel: true})
	for _, e := range []pglease.Event{
		{Kind: pglease.EventAcquired, Name: "a"},
		{Kind: pglease.EventRenewed, Name: "a", Latency: 2 * time.Millisecond},
		{Kind: pglease.EventContended, Name: "b"},
		{Kind: pglease.EventReleased, Name: "a"},
		{Kind: pglease.EventAcquired, Name: "b"},
		{Kind: pglease.EventElected, Name: "a"},
		{Kind: pglease.EventDemoted, Name: "a"},
		{Kind: pglease.EventElected, Name: "b"},
		{Kind: pglease.EventLeaderChanged, Name: "b"},
	} {
		o.Observe(e)
	}
	want := `
# HELP pglease_leases_held Leases held by this process.
# TYPE pglease_leases_held gauge
pglease_leases_held{name="a"} 0
pglease_leases_held{name="b"} 1
# HELP pglease_is_leader 1 while a pglease elector of this process leads (its lead function runs), else 0.
# TYPE pglease_is_leader gauge
pglease_is_leader{name="a"} 0
pglease_is_leader{name="b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pglease_leases_held", "pglease_is_leader"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(o.events.WithLabelValues("contended", "b")); got != 1 {
		t.Fatalf("contended = %v", got)
	}
	if n := testutil.CollectAndCount(o.renew); n != 1 {
		t.Fatalf("%d renew series", n)
	}
}

// The observer satisfies pglease.Observer.
var _ pglease.Observer = (*Observer)(nil)
