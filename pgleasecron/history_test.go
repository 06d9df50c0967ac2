package pgleasecron

// The run history, the reading of jobs, bad input, claims and the
// tables' migration.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestHistoryIsBounded(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "r", func(c *Config) { c.History = 5 })
	count := make(chan struct{}, 100)
	if err := s.AddSchedule("job", fast(100*time.Millisecond), func(context.Context) error { count <- struct{}{}; return nil }); err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	for range 12 {
		pgtest.Receive(t, count, "a run")
	}
	if runs := newRunHistory(t, table).runs("job"); len(runs) > 6 {
		t.Errorf("%d rows kept, want at most 5 (and the one running)", len(runs))
	}
	jobs, err := s.Jobs(context.Background())
	if err != nil || len(jobs) != 1 || jobs[0].Name != "job" || jobs[0].LastRun == nil || jobs[0].Schedule != "@every 100ms" {
		t.Fatalf("Jobs: %+v, %v", jobs, err)
	}
}

// The tests' history helper polls on one connection for the whole test,
// however often it reads: with a pool per read, 128 connections sat idle
// after 1.6 s of a poll, and the server refused the tests' connections
// (53300) by 3 s.
func TestRunHistoryPollsOnOneConnection(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "r", nil)
	if err := s.AddSchedule("job", fast(100*time.Millisecond), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	h := newRunHistory(t, table)
	h.wait("job", 3, ended)
	for range 50 {
		h.runs("job")
	}
	if n := pgtest.Backends(t, h.app); n != 1 {
		t.Fatalf("%d sessions named %q after the helper polled the history, want 1", n, h.app)
	}
}

func TestJobsReadsNothingIntoBeing(t *testing.T) {
	ctx := context.Background()
	table := tableIn(t)
	pool := pgtest.Pool(t)
	jobs, err := ReadJobs(ctx, pool, table)
	if err != nil || len(jobs) != 0 {
		t.Fatalf("ReadJobs on no tables: %v, %v", jobs, err)
	}
	runs, err := ReadHistory(ctx, pool, table, "x", 10)
	if err != nil || len(runs) != 0 {
		t.Fatalf("ReadHistory on no tables: %v, %v", runs, err)
	}
	if n := pgtest.Value[int](t, `SELECT count(*)::int FROM pg_class WHERE relnamespace = to_regnamespace($1)`, strings.Split(table, ".")[0]); n != 0 {
		t.Errorf("reading created %d relations", n)
	}
	if _, err := ReadJobs(ctx, pool, "Bad-Name"); !isInvalidIdentifier(err) {
		t.Errorf("ReadJobs(bad table): %v", err)
	}
}

func TestBadInput(t *testing.T) {
	pool := pgtest.Pool(t)
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil pool) succeeded")
	}
	for _, cfg := range []Config{
		{Config: pglease.Config{Table: "Bad"}},
		{History: -1},
		{Tolerance: -time.Second},
		{Config: pglease.Config{TTL: time.Millisecond}},
	} {
		if _, err := New(pool, cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	s, err := New(pool, Config{Config: pglease.Config{Table: tableIn(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nop := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name, spec string
		fn         func(context.Context) error
		opts       []Option
		want       string
	}{
		{"", "@hourly", nop, nil, "invalid job name"},
		{strings.Repeat("x", 201), "@hourly", nop, nil, "1 to 200 bytes"},
		{"bad\x00name", "@hourly", nop, nil, "invalid job name"},
		{"j", "every hour", nop, nil, "invalid schedule"},
		{"j", "CRON_TZ=Nowhere/Land 0 3 * * *", nop, nil, "unknown time zone"},
		{"j", "@hourly", nil, nil, "nil function"},
		{"j", "@hourly", nop, []Option{OnMissed(RunAll(0))}, "at least 1"},
		{"j", "@hourly", nop, []Option{OnAbandoned(Retry(0))}, "between 1 and 100"},
		{"j", "@hourly", nop, []Option{OnOverlap(OverlapPolicy(7))}, "unknown overlap policy"},
	} {
		err := s.Add(tc.name, tc.spec, tc.fn, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%q, %q): %v, want an error containing %q", tc.name, tc.spec, err, tc.want)
		}
		// A tool names the job its own way: the reason leaves it out.
		var ie *InvalidError
		if !errors.As(err, &ie) || !strings.Contains(ie.Reason, tc.want) || strings.Contains(ie.Reason, "pgleasecron: ") {
			t.Errorf("Add(%q, %q): %#v, want an *InvalidError whose Reason says %q", tc.name, tc.spec, err, tc.want)
		}
	}
	if err := s.Add("j", "@hourly", nop); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("j", "@daily", nop); err == nil || !strings.Contains(err.Error(), "registered twice") {
		t.Errorf("a duplicate name: %v", err)
	}
	empty, err := New(pool, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if err := empty.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no jobs") {
		t.Errorf("Run with no jobs: %v", err)
	}
}

// A tick is claimed once however many replicas race for it, never before
// its instant by the server's clock, and never after a later tick. (The
// racers all claim under the one live lease of the job: a claim under any
// other token is refused, see TestAClaimIsFencedByTheJobsLease.)
func TestClaimIsAtomic(t *testing.T) {
	ctx := context.Background()
	table := tableIn(t)
	var jobs []*job
	for i := range 8 {
		s := newScheduler(t, table, fmt.Sprintf("r%d", i), nil)
		if err := s.AddSchedule("job", fast(time.Second), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		jobs = append(jobs, s.jobs[0])
		t.Cleanup(func() { s.Close() })
	}
	last, err := jobs[0].register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	token := holdJobLease(t, table, "job")
	future := last.Add(time.Hour).Truncate(time.Second)
	if claimed, _, err := jobs[0].claim(ctx, future, StatusRunning, token, 0, ""); err != nil || claimed {
		t.Fatalf("a tick an hour ahead of the server's clock: claimed %v, %v", claimed, err)
	}
	tick := last.Add(-time.Hour) // before the job's registration: already passed
	if claimed, _, err := jobs[0].claim(ctx, tick, StatusRunning, token, 0, ""); err != nil || claimed {
		t.Fatalf("a tick before the last one: claimed %v, %v", claimed, err)
	}
	for round := range 5 {
		tick := last.Add(time.Duration(round+1) * time.Millisecond)
		pgtest.WaitFor(t, pgtest.Patience, "the tick to be due", func() bool {
			return pgtest.Value[bool](t, "SELECT $1::timestamptz <= now()", tick)
		})
		var wg sync.WaitGroup
		var mu sync.Mutex
		winners := 0
		for _, j := range jobs {
			wg.Go(func() {
				claimed, _, err := j.claim(ctx, tick, StatusRunning, token, 0, "")
				if err != nil {
					t.Error(err)
				}
				if claimed {
					mu.Lock()
					winners++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if winners != 1 {
			t.Fatalf("round %d: %d replicas claimed tick %s, want 1", round, winners, tick)
		}
	}
}

// The DDL creates the tables a scheduler uses: a scheduler whose client
// may not create anything runs on them.
func TestDDL(t *testing.T) {
	table := tableIn(t)
	ddl, err := admin.DDL(table)
	if err != nil {
		t.Fatal(err)
	}
	jobsDDL, err := DDL(table)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, ddl)
	refused := newScheduler(t, table, "r", func(c *Config) { c.DisableAutoMigrate = true })
	if err := refused.AddSchedule("job", fast(time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := refused.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "pgleasecron.DDL") {
		t.Errorf("Run without the tables, auto-migration off: %v", err)
	}
	refused.Close()
	pgtest.Exec(t, jobsDDL)
	pgtest.Exec(t, jobsDDL) // idempotent
	s := newScheduler(t, table, "r", func(c *Config) { c.DisableAutoMigrate = true })
	ran := make(chan struct{}, 10)
	if err := s.AddSchedule("job", fast(100*time.Millisecond), func(context.Context) error { ran <- struct{}{}; return nil }); err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	pgtest.Receive(t, ran, "a run")
	if _, err := DDL("No-Such"); !isInvalidIdentifier(err) {
		t.Errorf("DDL(bad name): %v", err)
	}
}

// Replicas that start at once on a fresh schema, spelling the table
// unqualified (behind a search_path) or schema-qualified, all create the
// lease table and the jobs tables without error: both are created under
// the lock of the schema as the server resolves it.
func TestMigrateAtOnceWithMixedSpellings(t *testing.T) {
	for round := range 4 {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
			defer cancel()
			schema := pgtest.Schema(t)
			u, err := url.Parse(pgtest.DSN(t))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			var scheds []*Scheduler
			for i := range 4 {
				table := schema + ".leases"
				pool := pgtest.Pool(t)
				if i%2 == 0 {
					table = "leases"
					if pool, err = pgxpool.New(ctx, u.String()); err != nil {
						t.Fatal(err)
					}
					defer pool.Close()
				}
				s, err := New(pool, Config{Config: pglease.Config{Table: table, Owner: fmt.Sprintf("replica-%d", i)}})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				scheds = append(scheds, s)
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, s := range scheds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if err := s.Migrate(ctx); err != nil {
						t.Errorf("replica %d (table %s): Migrate: %v", i, s.cfg.Table, err)
					}
				}()
			}
			close(start)
			wg.Wait()
		})
	}
}
