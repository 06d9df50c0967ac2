package pgleasetest_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/pgleasetest"
)

// A throwaway database for an example or a demo: a lease table in it, a
// lease taken and released.
func Example() {
	ctx := context.Background()
	cluster, err := pgleasetest.Start(ctx, pgleasetest.Options{})
	if errors.Is(err, pgleasetest.ErrNoBinaries) {
		log.Fatal(err) // says what to install
	}
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	client, err := pglease.Open(ctx, cluster.DSN(""), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.TryAcquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lease.Name())
	_ = lease.Release(ctx)
}
