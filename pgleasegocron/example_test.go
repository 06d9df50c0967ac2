package pgleasegocron_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/pgleasegocron"
)

// Every replica of a service runs the same gocron scheduler; with the
// Locker, each run of a job holds its lease, kept a while past the run so
// that the other replicas' firings of the same tick skip.
func ExampleNewLocker() {
	ctx := context.Background()
	leases, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Table: "example_gocron"})
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()

	locker := pgleasegocron.NewLocker(leases, pglease.WithMinHold(30*time.Second)) // the job runs every minute
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan struct{})
	_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(func() { close(ran) }),
		gocron.WithName("refresh-cache"), gocron.WithStartAt(gocron.WithStartImmediately()))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-ran // this example stops after one run; a service runs until it shuts down
	if err := s.Shutdown(); err != nil {
		log.Fatal(err)
	}
	info, err := leases.Get(ctx, pgleasegocron.LeasePrefix+"refresh-cache")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("lease kept past the run:", info.Remaining > 0)
	if _, err := admin.ForceRelease(ctx, leases, pgleasegocron.LeasePrefix+"refresh-cache"); err != nil { // for the next run of this example
		log.Fatal(err)
	}
	// Output:
	// lease kept past the run: true
}

// With the Elector, only the leading replica's scheduler runs jobs.
func ExampleNewElector() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	leases, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{Table: "example_gocron"})
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()

	elector, err := pgleasegocron.NewElector(leases, "reports-leader", pglease.ElectorConfig{})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = elector.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan struct{})
	_, err = s.NewJob(gocron.DurationJob(100*time.Millisecond), gocron.NewTask(func() {
		select {
		case <-ran:
		default:
			close(ran)
		}
	}))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-ran // once this replica leads
	if err := s.Shutdown(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ran as the leader:", elector.IsLeader(ctx) == nil)
	// Output:
	// ran as the leader: true
}
