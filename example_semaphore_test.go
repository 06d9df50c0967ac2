package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/pglease/pglease"
)

// Every client of a semaphore must ask for the same number of slots: the
// count is recorded with each slot, and a client asking for another while
// any slot is held gets a *KindError at once, naming both kinds, rather
// than letting more holders in than the smaller count allows.
func ExampleKindError() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	l, err := client.TryAcquire(ctx, "example-uploads", pglease.WithSlots(3))
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.TryAcquire(ctx, "example-uploads", pglease.WithSlots(5))
	var ke *pglease.KindError
	fmt.Printf("%t Want=%q Have=%q\n", errors.As(err, &ke), ke.Want, ke.Have)
	fmt.Println(err)

	// Once every slot is released, the next client may use another count.
	l.Release(ctx)
	l, err = client.TryAcquire(ctx, "example-uploads", pglease.WithSlots(5))
	fmt.Println(err == nil)
	l.Release(ctx)

	// Names of the slot form are reserved for slots.
	_, err = client.TryAcquire(ctx, "example-uploads#0")
	fmt.Println(errors.As(err, new(*pglease.InvalidError)))
	// Output:
	// true Want="semaphore of 5 slots" Have="semaphore of 3 slots"
	// pglease: "example-uploads" is held as a semaphore of 3 slots, and this client asked for a semaphore of 5 slots: use the same kind of lease (WithSlots, WithShared, WithQuota) on every client of a name, or wait until its leases are released
	// true
	// true
}
