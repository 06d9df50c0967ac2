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

// Acquire a lease without waiting, do the work under the lease's context,
// and release it.
func ExampleClient_TryAcquire() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := client.TryAcquire(ctx, "example-nightly-report", pglease.WithTTL(30*time.Second))
	if errors.Is(err, pglease.ErrNotAcquired) {
		fmt.Println("another instance is running the report")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// Work under lease.Context(): it is cancelled the moment the lease is lost.
	fmt.Println("running the report; token is positive:", lease.Token() > 0)
	// Output: running the report; token is positive: true
}

// Wait for a lease held elsewhere, with a timeout.
func ExampleClient_Acquire() {
	ctx := context.Background()
	holder, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Close()
	waiter, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer waiter.Close()

	first, err := holder.TryAcquire(ctx, "example-migration")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		first.Release(ctx) // the waiter is woken by a notification
	}()

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	second, err := waiter.Acquire(wctx, "example-migration")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	fmt.Println("token increased:", second.Token() > first.Token())
	// Output: token increased: true
}

// Fencing: check the token inside the transaction that does the protected
// write, so that a paused, stale holder's write cannot commit.
func ExampleLease_Guard() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Acquire(ctx, "example-ledger")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	conn, err := pgxConnect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := lease.Guard(ctx, tx); err != nil {
		log.Fatal(err) // ErrNotHeld: someone else holds the lease now
	}
	// ... the protected writes go here, in tx ...
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed under the lease")
	// Output: committed under the lease
}

// Fast failover: when the holder process dies, a waiter using the same
// option takes over within milliseconds instead of waiting out the TTL.
func ExampleWithFastFailover() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Acquire(ctx, "example-leader", pglease.WithFastFailover(), pglease.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	info, err := client.Get(ctx, lease.Name()) // the row, as operators see it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fast failover:", info.FastFailover)
	// Output: fast failover: true
}
