package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/pglease/pglease"
)

// App replicas hold "schema" shared while they serve; a migration takes it
// exclusive, and waits until the replicas let go (new shared acquisitions
// queue behind it meanwhile, so it is not starved).
func ExampleWithShared() {
	ctx := context.Background()
	app, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Owner: "app"})
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()
	migrator, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Owner: "migrator"})
	if err != nil {
		log.Fatal(err)
	}
	defer migrator.Close()

	r1, err := app.Acquire(ctx, "example-schema", pglease.WithShared())
	if err != nil {
		log.Fatal(err)
	}
	r2, err := app.Acquire(ctx, "example-schema", pglease.WithShared())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two shared holders:", r1.Name(), r2.Name())

	_, err = migrator.TryAcquire(ctx, "example-schema")
	fmt.Println("exclusive beside them:", errors.Is(err, pglease.ErrNotAcquired))

	r1.Release(ctx)
	r2.Release(ctx)
	m, err := migrator.Acquire(ctx, "example-schema")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Release(ctx)
	fmt.Println("exclusive once they let go:", m.Name())
	// Output:
	// two shared holders: example-schema#0 example-schema#1
	// exclusive beside them: true
	// exclusive once they let go: example-schema
}
