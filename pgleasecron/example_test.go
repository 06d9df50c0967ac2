package pgleasecron_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

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
