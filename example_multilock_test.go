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

// Acquire several names all or nothing (here: two accounts for a
// transfer), work under the set's context, and release them together.
// Another client asking for an overlapping set, in any order, waits rather
// than deadlocks.
func ExampleClient_AcquireAll() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	set, err := client.AcquireAll(wctx, []string{"example-account-42", "example-account-7"})
	if err != nil {
		log.Fatal(err)
	}
	defer set.Release(ctx)

	// Each name has its own fencing token; set.Context() is cancelled the
	// moment any of the leases is lost.
	for _, l := range set.Leases() {
		fmt.Println(l.Name(), "token is positive:", l.Token() > 0)
	}

	// A second client trying for an overlapping set gets nothing, and
	// learns which name is held.
	other, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Owner: "other"})
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	_, err = other.TryAcquireAll(ctx, []string{"example-account-7", "example-account-99"})
	var held *pglease.HeldError
	if errors.As(err, &held) {
		fmt.Println("held:", held.Holder.Name)
	}
	// Output:
	// example-account-42 token is positive: true
	// example-account-7 token is positive: true
	// held: example-account-7
}
