package pgleaseprom_test

import (
	"fmt"
	"log"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/pgleaseprom"
)

// Register the observer with a registry, pass it to the clients' Config,
// and serve the registry. Here events are fed by hand, as a client would
// report them, and the gauges printed.
func Example() {
	reg := prometheus.NewRegistry()
	obs := pgleaseprom.New(pgleaseprom.Options{})
	if err := reg.Register(obs); err != nil {
		log.Fatal(err)
	}
	// In a program:
	//
	//	client, err := pglease.Open(ctx, dsn, pglease.Config{Observer: obs})
	//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for _, e := range []pglease.Event{
		{Kind: pglease.EventAcquired, Name: "nightly-report", Client: "c1", Wait: 3 * time.Millisecond},
		{Kind: pglease.EventAcquired, Name: "scheduler", Client: "c1"},
		{Kind: pglease.EventElected, Name: "scheduler", Client: "c1"},
		{Kind: pglease.EventHeartbeat, Client: "c1", Latency: 2 * time.Millisecond, Count: 2},
		{Kind: pglease.EventReleased, Name: "nightly-report", Client: "c1", Hold: 42 * time.Second},
	} {
		obs.Observe(e)
	}
	out, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "pglease_leases_held", "pglease_is_leader")
	if err != nil {
		log.Fatal(err)
	}
	os.Stdout.Write(out)
	// Output:
	// # HELP pglease_is_leader 1 while an elector of name of the clients of this observer is in a term (its lead function runs), else 0.
	// # TYPE pglease_is_leader gauge
	// pglease_is_leader{name="scheduler"} 1
	// # HELP pglease_leases_held Leases held now by the clients of this observer.
	// # TYPE pglease_leases_held gauge
	// pglease_leases_held 1
}

// Registering fails, rather than panicking, when the registry has the
// metrics already: give a second observer its own Namespace.
func ExampleRegister() {
	reg := prometheus.NewRegistry()
	if _, err := pgleaseprom.Register(reg, pgleaseprom.Options{}); err != nil {
		log.Fatal(err)
	}
	_, err := pgleaseprom.Register(reg, pgleaseprom.Options{})
	fmt.Println("second observer:", err)
	other, err := pgleaseprom.Register(reg, pgleaseprom.Options{Namespace: "batch_leases"})
	fmt.Println("with its own namespace:", other != nil, err)
	// Output:
	// second observer: duplicate metrics collector registration attempted
	// with its own namespace: true <nil>
}
