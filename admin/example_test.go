package admin_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// Operators: who holds what, since when, and is the holder alive?
func ExampleList() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Owner: "reporter-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.TryAcquire(ctx, "example-list")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	infos, err := admin.List(ctx, client)
	if err != nil {
		log.Fatal(err)
	}
	for _, info := range infos {
		if info.Name == "example-list" {
			held := info.Remaining > 0
			stale := held && info.HeartbeatAge > time.Minute
			fmt.Println(info.Name, info.Owner, info.Kind, held, stale)
		}
	}
	// Output: example-list reporter-1 plain true false
}

// The DDL for migration tools (golang-migrate, goose, atlas, Alembic…).
func ExampleDDL() {
	ddl, err := admin.DDL("ops.leases")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ddl[:len(`CREATE SCHEMA IF NOT EXISTS "ops"`)])
	// Output: CREATE SCHEMA IF NOT EXISTS "ops"
}

// Who waits for a lease: a client blocked on a held name is listed with
// its owner and how long it has waited, first in line first.
func ExampleWaiters() {
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
		ws, err := admin.Waiters(ctx, holder, "example-queue")
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
