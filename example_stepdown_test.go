package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/pglease/pglease"
)

// A rolling deploy: before stopping the instance that leads, ask it to step
// down, so that another instance takes over at once rather than when the
// stopped leader's lease expires. Any client may ask; here the leader's own
// client does, for brevity.
func ExampleClient_RequestStepDown() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	elected := make(chan struct{})
	elector, err := client.NewElector("example-rolling-deploy", func(ctx context.Context) error {
		close(elected)
		<-ctx.Done()
		if errors.Is(context.Cause(ctx), pglease.ErrStepDown) {
			fmt.Println("asked to step down")
		}
		cancel() // stop the example; a real elector campaigns again after its hold-off
		return nil
	}, pglease.ElectorConfig{})
	if err != nil {
		log.Fatal(err)
	}
	asked := make(chan error, 1)
	go func() {
		<-elected
		// Not ctx itself: the leader stops the example (cancel) as soon as
		// it hears the request, which may be before this call has read
		// the server's reply.
		asked <- client.RequestStepDown(context.WithoutCancel(ctx), "example-rolling-deploy")
	}()
	err = elector.Run(ctx)
	fmt.Println(errors.Is(err, context.Canceled))
	select {
	case <-elected:
		if err := <-asked; err != nil {
			log.Fatal(err)
		}
	default: // never elected: Run's error says why
	}
	// Output:
	// asked to step down
	// true
}
