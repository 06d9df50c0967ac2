package pgleaseriver_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/pgleaseriver"
)

type syncAccountArgs struct {
	AccountID int64 `json:"account_id"`
}

func (syncAccountArgs) Kind() string { return "sync_account" }

// Every River client of a service installs the middleware: jobs of
// sync_account then run one at a time per account across the fleet, and
// one that finds its account's job running elsewhere is snoozed.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	quiet := slog.New(slog.DiscardHandler) // River logs to standard output by default
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	leases, err := pglease.NewFromPool(pool, pglease.Config{Table: "example_river_leases"})
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()

	mw, err := pgleaseriver.New(leases, pgleaseriver.Limit{Kind: "sync_account", Key: pgleaseriver.ArgsKey("account_id")})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[syncAccountArgs]) error {
		lease, _ := pgleaseriver.LeaseOf(ctx)
		fmt.Println("syncing account", job.Args.AccountID, "under", lease.Name(), "with a fencing token:", lease.Token() > 0)
		close(done)
		return nil
	}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:    workers,
		Middleware: []rivertype.Middleware{mw},
		Logger:     quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Insert(ctx, syncAccountArgs{AccountID: 42}, nil); err != nil {
		log.Fatal(err)
	}
	<-done
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// syncing account 42 under river:sync_account:42 with a fencing token: true
}
