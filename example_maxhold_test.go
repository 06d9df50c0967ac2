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

// A job that may hang must not keep its name forever: WithMaxHold ends the
// lease after a second even though its renewals succeed, and frees the
// name at once for the next holder.
func ExampleWithMaxHold() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := client.Acquire(ctx, "example-sync", pglease.WithMaxHold(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	<-lease.Context().Done() // a hung job would never return; its lease ends anyway
	fmt.Println("hold limit:", errors.Is(context.Cause(lease.Context()), pglease.ErrHoldLimit))

	next, err := client.Acquire(ctx, "example-sync")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	fmt.Println("taken again with a newer token:", next.Token() > lease.Token())
	// Output:
	// hold limit: true
	// taken again with a newer token: true
}
