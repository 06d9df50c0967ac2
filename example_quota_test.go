package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/pglease/pglease"
)

// The reporting replica allows 10 connections: a large report takes 6 of
// them, small ones take 2 each, fleet-wide. A small report that would go
// over is refused (or, with Acquire, waits its turn).
func ExampleWithQuota() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Owner: "reports"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	large, err := client.Acquire(ctx, "example-replica-conns", pglease.WithQuota(10, 6))
	if err != nil {
		log.Fatal(err)
	}
	small, err := client.Acquire(ctx, "example-replica-conns", pglease.WithQuota(10, 2))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("8 of 10 units held, each holder with its own token:", large.Token() != small.Token())

	_, err = client.TryAcquire(ctx, "example-replica-conns", pglease.WithQuota(10, 3))
	fmt.Println("3 more units:", errors.Is(err, pglease.ErrNotAcquired))

	large.Release(ctx)
	more, err := client.TryAcquire(ctx, "example-replica-conns", pglease.WithQuota(10, 3))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("3 more once the large report ended:", more != nil)
	more.Release(ctx)
	small.Release(ctx)
	// Output:
	// 8 of 10 units held, each holder with its own token: true
	// 3 more units: true
	// 3 more once the large report ended: true
}
