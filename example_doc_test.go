package pglease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pglease/pglease"
)

// Open a client, wait for a name, work under the lease's context and
// release it. The package documentation shows this code.
func Example() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Acquire(ctx, "example-report", pglease.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Work under lease.Context(): it ends the moment the lease is lost.
	work := lease.Context()

	fmt.Println(lease.Name(), "held with a token:", lease.Token() > 0, "lost:", work.Err() != nil)
	// Output: example-report held with a token: true lost: false
}
