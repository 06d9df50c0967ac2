package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pglease/pglease"
)

// Run a scheduled job on exactly one of the replicas that fire it.
// WithMinHold keeps the lease for a while after the job, so a replica whose
// cron fires a little later does not run the job again.
func ExampleClient_TryRun() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = client.TryRun(ctx, "example-hourly-sync", func(ctx context.Context) error {
		fmt.Println("syncing")
		return nil
	}, pglease.WithMinHold(2*time.Second))
	if errors.Is(err, pglease.ErrNotAcquired) {
		fmt.Println("another replica ran it")
	} else if err != nil {
		log.Fatal(err)
	}
	// Output: syncing
}

// A leader loop: lead runs while this instance leads; its context ends when
// leadership ends. Run returns after lead has returned.
func ExampleElector() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	elector, err := client.NewElector("example-scheduler-leader", func(ctx context.Context) error {
		fmt.Println("elected")
		cancel() // stop the example; a real leader works until ctx ends
		<-ctx.Done()
		fmt.Println("stepped down")
		return nil
	}, pglease.ElectorConfig{LeaseOptions: []pglease.Option{pglease.WithTTL(10 * time.Second)}})
	if err != nil {
		log.Fatal(err)
	}
	err = elector.Run(ctx)
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// elected
	// stepped down
	// true
}

// A semaphore: at most two concurrent holders of "example-exporter".
func ExampleWithSlots() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	a, _ := client.TryAcquire(ctx, "example-exporter", pglease.WithSlots(2))
	b, _ := client.TryAcquire(ctx, "example-exporter", pglease.WithSlots(2))
	_, err = client.TryAcquire(ctx, "example-exporter", pglease.WithSlots(2))
	fmt.Println(a != nil, b != nil, a.Name() != b.Name(), errors.Is(err, pglease.ErrNotAcquired))
	a.Release(ctx)
	b.Release(ctx)
	// Output: true true true true
}

// eventLog is an [pglease.Observer] that keeps the events it is sent.
type eventLog chan pglease.Event

func (l eventLog) Observe(e pglease.Event) { l <- e }

// Observe lease events (acquired, renewed with latency, lost, alert…) for
// logs or metrics; pgleaseprom and pgleaseotel adapt them to Prometheus and
// OpenTelemetry.
func ExampleObserver() {
	ctx := context.Background()
	events := make(eventLog, 16)
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{
		Observer: events,
	})
	if err != nil {
		log.Fatal(err)
	}
	lease, err := client.TryAcquire(ctx, "example-observed")
	if err != nil {
		log.Fatal(err)
	}
	lease.Release(ctx)
	client.Close() // delivers pending events before returning
	close(events)
	for e := range events {
		fmt.Println(e.Kind, e.Name)
	}
	// Output:
	// acquired example-observed
	// released example-observed
}
