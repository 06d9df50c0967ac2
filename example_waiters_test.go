package pglease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pglease/pglease"
)

// Who waits for a lease: a client blocked on a held name is listed with
// its owner and how long it has waited, first in line first.
func ExampleClient_Waiters() {
	ctx := context.Background()
	holder, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Owner: "pod-a"})
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Close()
	waiter, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Owner: "pod-b"})
	if err != nil {
		log.Fatal(err)
	}
	defer waiter.Close()

	lease, err := holder.Acquire(ctx, "example-queue")
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan *pglease.Lease)
	go func() {
		l, err := waiter.Acquire(ctx, "example-queue") // blocks: queued behind pod-a
		if err != nil {
			log.Fatal(err)
		}
		got <- l
	}()
	for {
		ws, err := holder.Waiters(ctx, "example-queue")
		if err != nil {
			log.Fatal(err)
		}
		if len(ws) > 0 {
			fmt.Println("waiting:", ws[0].Owner)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	lease.Release(ctx)
	next := <-got
	defer next.Release(ctx)
	fmt.Println("handed to:", next.Owner())
	// Output:
	// waiting: pod-b
	// handed to: pod-b
}
