//go:build unix

package pglease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"time"

	"github.com/pglease/pglease"
)

// Hand a fast-failover lease's session to a worker process: should this
// process die, the server ends the session, and a waiter takes over, only
// once the worker has exited too.
func ExampleLease_SessionFile() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Acquire(ctx, "example-worker", pglease.WithFastFailover(), pglease.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	session, err := lease.SessionFile()
	if err != nil {
		log.Fatal(err)
	}
	worker := exec.CommandContext(lease.Context(), "true")
	worker.ExtraFiles = []*os.File{session} // held, never used, by the worker
	err = worker.Start()
	session.Close() // the worker has its copy
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker done:", worker.Wait() == nil)
	// Output: worker done: true
}
