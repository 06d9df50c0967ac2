package pgleasecron_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/pgleasecron"
)

// Every replica of a service runs the same scheduler; each tick of a job
// runs on one of them, under the job's lease.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	s, err := pgleasecron.New(pool, pgleasecron.Config{Config: pglease.Config{Table: "example_cron"}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	err = s.Add("report", "@every 1s", func(ctx context.Context) error {
		tick, _ := pgleasecron.TickOf(ctx)
		fmt.Println("running", tick.Job, "for its tick; fencing token issued:", tick.Lease.Token() > 0)
		stop() // this example stops after one tick; a service runs until it shuts down
		return nil
	}, pgleasecron.OnMissed(pgleasecron.Skip), pgleasecron.OnOverlap(pgleasecron.SkipOverlap))
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(ctx); err != nil {
		log.Fatal(err)
	}

	runs, err := s.History(context.Background(), "report", 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(runs[0].Status, runs[0].Replica == s.Owner())
	// Output:
	// running report for its tick; fencing token issued: true
	// succeeded true
}

// A service that keeps robfig/cron wraps its job: each replica's Cron
// fires it, and each tick runs on one replica.
func ExampleScheduler_Wrap() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	s, err := pgleasecron.New(pool, pgleasecron.Config{Config: pglease.Config{Table: "example_robfig"}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // after the Cron has stopped

	wrap, err := s.Wrap("sync-prices", "* * * * * *") // robfig's spec, 6 fields with cron.WithSeconds
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	c := cron.New(cron.WithSeconds())
	_, err = c.AddJob("* * * * * *", cron.NewChain(wrap).Then(cron.FuncJob(func() {
		select {
		case ran <- struct{}{}:
		default:
		}
	})))
	if err != nil {
		log.Fatal(err)
	}
	c.Start()
	<-ran // this example stops after one tick; a service runs until it shuts down
	<-c.Stop().Done()

	runs, err := s.History(ctx, "sync-prices", 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(runs[0].Status, runs[0].Replica == s.Owner())
	// Output:
	// succeeded true
}
