package pglease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
)

// TestLibraryFastFailoverLeaseNotSessionBound is a regression test for a bug found by
// the CLI tests: when two FastFailover acquisitions of a
// free name race, the winner can get a lease that is not session-bound
// (its pg_try_advisory_lock lost to the loser's momentary lock), so a
// later failover waits for the TTL.
func TestLibraryFastFailoverLeaseNotSessionBound(t *testing.T) {
	ctx := context.Background()
	table := pgtest.Schema(t) + ".leases"
	var clients []*pglease.Client
	for i := 0; i < 4; i++ {
		c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table, Owner: fmt.Sprint("c", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	unbound := 0
	for round := 0; round < 30; round++ {
		name := fmt.Sprint("race-", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []*pglease.Lease
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.TryAcquire(ctx, name, pglease.WithFastFailover(), pglease.WithTTL(5*time.Second))
				if err == nil {
					mu.Lock()
					won = append(won, l)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, l := range won {
			if !l.SessionBound() {
				unbound++
			}
			_ = l.Release(ctx)
		}
	}
	if unbound > 0 {
		t.Errorf("%d of 30 FastFailover leases won under contention were not session-bound", unbound)
	}
}

// TestLibraryConcurrentMigrateSameNewSchema reproduces a library bug:
// clients that create different tables in the same new schema at the same
// time fail with SQLSTATE 23505 on pg_namespace_nspname_index, because the
// CREATE SCHEMA IF NOT EXISTS runs under a per-table, not per-schema, lock.
func TestLibraryConcurrentMigrateSameNewSchema(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		schema := fmt.Sprintf("race_schema_%d_%d", time.Now().UnixNano()%1e6, round)
		t.Cleanup(func() { _, _ = pgtest.Pool(t).Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for i := 0; i < 4; i++ {
			c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: fmt.Sprintf("%s.t%d", schema, i)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wg.Add(1)
			go func() { defer wg.Done(); errs <- c.Migrate(ctx) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: %v", round, err)
			}
		}
	}
}

// TestLibraryMigrateNeedsDatabaseCreateForExistingSchema is a regression test for a
// former library limitation: when the schema exists but the table does not,
// Migrate still runs CREATE SCHEMA IF NOT EXISTS, which PostgreSQL checks
// against the database's CREATE privilege before it looks for the schema,
// so a role that may create tables in the schema gets "permission denied
// for database".
func TestLibraryMigrateNeedsDatabaseCreateForExistingSchema(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	role := "r_" + schema[len(schema)-20:]
	pool := pgtest.Pool(t)
	for _, sql := range []string{"CREATE ROLE " + role + " LOGIN", "GRANT ALL ON SCHEMA " + schema + " TO " + role} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE; DROP ROLE "+role) })
	dsn := strings.Replace(pgtest.DSN(t), "postgres://postgres@", "postgres://"+role+"@", 1)
	c, err := pglease.Open(ctx, dsn, pglease.Config{Table: schema + ".leases"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		t.Errorf("Migrate in an existing schema the role may create in: %v", err)
	}
}
