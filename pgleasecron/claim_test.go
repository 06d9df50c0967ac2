package pgleasecron

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

// firstThen is a schedule whose first instant is at and the next ones
// come every then: a test starts with one tick due and none soon after.
type firstThen struct {
	at   time.Time
	then time.Duration
}

func (s firstThen) Next(t time.Time) time.Time {
	if t.Before(s.at) {
		return s.at
	}
	return s.at.Add((t.Sub(s.at)/s.then + 1) * s.then)
}

func (s firstThen) String() string { return "test: first " + s.at.Format(time.RFC3339Nano) }

// oneTickDue migrates table and returns a schedule whose only due tick
// is a second old by the server's clock (on time: a tick is late only
// after Config.Tolerance), the next an hour later.
func oneTickDue(t *testing.T, s *Scheduler, job string) firstThen {
	t.Helper()
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	setLastTick(t, s.cfg.Table, job, time.Hour)
	now := pgtest.Value[time.Time](t, "SELECT now()")
	return firstThen{at: now.Add(-time.Second).Truncate(time.Millisecond).UTC(), then: time.Hour}
}

// proxiedScheduler returns a scheduler whose pool goes through a proxy
// the test controls. Each statement takes one round trip (no prepare
// first, no ping before a connection's use), so that a statement sent
// while the proxy drops replies runs on the server.
func proxiedScheduler(t *testing.T, table, owner string) (*Scheduler, *pgtest.Proxy) {
	t.Helper()
	proxy := pgtest.NewProxy(t, pgtest.HostPort(t, pgtest.DSN(t)))
	pcfg, err := pgxpool.ParseConfig(proxy.DSN(pgtest.DSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pcfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := New(pool, Config{Config: pglease.Config{Table: table, Owner: owner, TTL: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return s, proxy
}

// leaseClient returns a lease client of the test's own on table.
func leaseClient(t *testing.T, table string) *pglease.Client {
	t.Helper()
	c, err := pglease.NewFromPool(pgtest.Pool(t), pglease.Config{Table: table, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// holdJobLease takes job's lease for the test and returns its token.
func holdJobLease(t *testing.T, table, job string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	l, err := leaseClient(t, table).Acquire(ctx, leasePrefix+job)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l.Token()
}

// runOf returns the row of tick among runs.
func runOf(runs []Run, tick time.Time) (Run, bool) {
	for _, r := range runs {
		if r.Tick.Equal(tick) {
			return r, true
		}
	}
	return Run{}, false
}

// LeaseOptions that would let a tick have two runners, or that the
// scheduler cannot honour, are refused by Add with an error that says
// why and what to do; the job is not registered. The others are taken.
func TestLeaseOptionsThatBreakTheOneRunnerRuleAreRefused(t *testing.T) {
	s := newScheduler(t, tableIn(t), "r", nil)
	defer s.Close()
	nop := func(context.Context) error { return nil }
	for _, tc := range []struct {
		opt  pglease.Option
		want string
	}{
		{pglease.WithSlots(2), "pglease.WithSlots(2) would let 2 replicas hold the job's lease"},
		{pglease.WithSlots(1000), "drop WithSlots"},
		{pglease.WithMinHold(time.Second), "pglease.WithMinHold(1s) would keep the job's lease held after each run"},
		{pglease.WithSlots(0), "slots must be between 1 and 1000"},
		{pglease.WithTTL(time.Millisecond), "LeaseOptions"},
	} {
		err := s.Add("job", "@hourly", nop, LeaseOptions(tc.opt))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), `pgleasecron: job "job": LeaseOptions: `) {
			t.Errorf("Add with %s: %v, want an error saying %q", tc.want, err, tc.want)
		}
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Job != "job" || strings.Contains(ie.Reason, "pglease: ") {
			t.Errorf("Add with %s: %#v, want an *InvalidError of job \"job\" whose Reason has no prefix", tc.want, err)
		}
	}
	if err := s.Add("job", "@hourly", nop, LeaseOptions(pglease.WithSlots(0))); !errors.As(err, new(*pglease.InvalidError)) {
		t.Errorf("Add with pglease.WithSlots(0): %v, want pglease's *InvalidError as its cause", err)
	}
	if len(s.jobs) != 0 {
		t.Fatalf("%d jobs registered by refused calls", len(s.jobs))
	}
	// One runner at a time, whatever these do: a plain lease on the job's
	// name, held by one session at most (fast failover), a TTL, metadata.
	err := s.Add("job", "@hourly", nop, LeaseOptions(pglease.WithSlots(1), pglease.WithMinHold(0),
		pglease.WithFastFailover(), pglease.WithTTL(5*time.Second), pglease.WithMetadata(map[string]any{"team": "a"})))
	if err != nil {
		t.Fatalf("Add with options that keep one runner: %v", err)
	}
	if j := s.jobs[0]; len(j.rows) != 1 || j.rows[0] != "cron:job" || j.check != 5*time.Second {
		t.Errorf("job's rows %q, check interval %s: want [cron:job], 5s", j.rows, j.check)
	}
}

// insertRun writes a run row of job, as a runner under token would.
func insertRun(t *testing.T, table, job string, tick time.Time, token int64, status Status) {
	t.Helper()
	pgtest.Exec(t, fmt.Sprintf(`INSERT INTO %s_runs (job, tick, status, replica, token, claimed_at, started_at)
		VALUES ($1, $2, $3, $4, $5, now(), now())`, table), job, tick, string(status), fmt.Sprint("replica-of-", token), token)
}

// retryingJob returns a scheduler on table, migrated, with one job "job"
// that runs a dead runner's tick again (Retry(3)), and the job.
func retryingJob(t *testing.T, table string) (*Scheduler, *job) {
	t.Helper()
	s := newScheduler(t, table, "r", nil)
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("job", "@hourly", func(context.Context) error { return nil }, OnAbandoned(Retry(3))); err != nil {
		t.Fatal(err)
	}
	return s, s.jobs[0]
}

// A run is an orphan when its own lease row, as the lease table names the
// job's rows, is gone or expired; never because the caller holds the lease
// under another token, nor because the rows are not named like the job.
// The job's rows are renamed here as slots would rename them (Add refuses
// WithSlots; this is what a renaming option would do).
func TestTheOrphanCheckJudgesARunByItsOwnLeaseRow(t *testing.T) {
	ctx := context.Background()
	table := tableIn(t)
	_, j := retryingJob(t, table)
	slots, err := (pglease.Config{}).Plan(j.lease, pglease.WithSlots(2))
	if err != nil {
		t.Fatal(err)
	}
	j.rows = slots.Names
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), table)
	leases.Insert("cron:job#0", "other-replica", 101, time.Minute, "") // a run going on
	leases.Insert("cron:job#1", "caller", 102, time.Minute, "")        // the caller's
	leases.Insert("cron:other", "x", 103, time.Minute, "")             // another job's lease
	base := time.Now().Truncate(time.Second).UTC()
	insertRun(t, table, "job", base, 101, StatusRunning)                    // live: not an orphan
	insertRun(t, table, "job", base.Add(time.Second), 555, StatusRunning)   // no lease row: orphan
	insertRun(t, table, "job", base.Add(2*time.Second), 103, StatusRunning) // not the job's lease: orphan
	insertRun(t, table, "job", base.Add(3*time.Second), 556, StatusLost)    // lost, attempts left: orphan
	found, err := j.orphans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, o := range found {
		got = append(got, o.token)
	}
	if want := []int64{555, 103, 556}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("orphans by token: %v, want %v (101 is a live run's)", got, want)
	}
}

// A running or missed claim is made only while the claimer's token is on
// the job's lease row, unexpired by the server's clock.
func TestAClaimIsFencedByTheJobsLease(t *testing.T) {
	ctx := context.Background()
	table := tableIn(t)
	s := newScheduler(t, table, "r", nil)
	defer s.Close()
	if err := s.AddSchedule("job", fast(time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	j := s.jobs[0]
	last, err := j.register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	token := holdJobLease(t, table, "job")
	tick := last.Add(time.Millisecond)
	pgtest.WaitFor(t, pgtest.Patience, "the tick to be due", func() bool {
		return pgtest.Value[bool](t, "SELECT $1::timestamptz <= now()", tick)
	})
	for _, status := range []Status{StatusRunning, StatusMissed} {
		if claimed, _, err := j.claim(ctx, tick, status, token+1000, 0, ""); err != nil || claimed {
			t.Errorf("a %s claim under token %d, which holds no lease: claimed %v, %v", status, token+1000, claimed, err)
		}
	}
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), table)
	leases.SetExpiry("cron:job", -time.Millisecond)
	if claimed, _, err := j.claim(ctx, tick, StatusRunning, token, 0, ""); err != nil || claimed {
		t.Errorf("a claim under token %d, whose row expired by the server's clock: claimed %v, %v", token, claimed, err)
	}
	leases.SetExpiry("cron:job", time.Minute)
	if claimed, _, err := j.claim(ctx, tick, StatusRunning, token, 0, ""); err != nil || !claimed {
		t.Errorf("a claim under the holder's token %d: claimed %v, %v", token, claimed, err)
	}
}

// A holder that pauses (here: cut off from the database) between taking
// the job's lease and claiming the tick, past its lease's end, claims
// nothing when it resumes: the tick goes to the next holder and runs.
func TestAHolderResumingAfterItsLeaseEndedClaimsNothing(t *testing.T) {
	table := tableIn(t)
	s, proxy := proxiedScheduler(t, table, "paused")
	sched := oneTickDue(t, s, "job")
	operator := leaseClient(t, table)
	var mu sync.Mutex
	tokens := map[int64]int{} // the runs of the tick, by lease token
	paused := make(chan int64, 1)
	var once sync.Once
	s.beforeClaim = func(tick time.Time, status Status, token int64) {
		if status != StatusRunning {
			return
		}
		once.Do(func() {
			proxy.Partition(true)
			defer proxy.Partition(false)
			// Another holder takes the lease once it expired on the
			// server, and lets it go before this one resumes.
			ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
			defer cancel()
			l, err := operator.Acquire(ctx, "cron:job")
			if err != nil {
				t.Errorf("another holder's Acquire: %v", err)
			} else {
				l.Release(ctx)
			}
			paused <- token
		})
	}
	err := s.AddSchedule("job", sched, func(ctx context.Context) error {
		tick, _ := TickOf(ctx)
		mu.Lock()
		tokens[tick.Lease.Token()]++
		mu.Unlock()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	old := pgtest.Receive(t, paused, "the holder's pause")
	runs := newRunHistory(t, table).wait("job", 1, func(r Run) bool { return r.Tick.Equal(sched.at) && ended(r) })
	r, _ := runOf(runs, sched.at)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("tick %s: %s under token %d (the paused holder's was %d); runs by token %v", r.Tick.Format(time.RFC3339Nano), r.Status, r.Token, old, tokens)
	if r.Token == old || tokens[old] != 0 {
		t.Errorf("the tick was claimed (%s %q) under token %d, the lease the holder lost while paused", r.Status, r.Error, old)
	}
	if r.Status != StatusSucceeded {
		t.Errorf("the tick: %s %q, want it run by the next holder", r.Status, r.Error)
	}
}

// A claim whose reply is lost after it committed (the connection fails)
// runs all the same: the claimer asks after it, rather than leave a
// running row that the next holder records as abandoned.
func TestAClaimWhoseReplyIsLostStillRuns(t *testing.T) {
	table := tableIn(t)
	s, proxy := proxiedScheduler(t, table, "r")
	sched := oneTickDue(t, s, "job")
	history := newRunHistory(t, table)
	var once sync.Once
	s.beforeClaim = func(tick time.Time, status Status, token int64) {
		if status != StatusRunning {
			return
		}
		once.Do(func() {
			proxy.DropReplies(true)
			go func() {
				defer proxy.ResetAll() // the claim's connection fails, its reply lost
				defer proxy.DropReplies(false)
				committed := pgtest.Eventually(pgtest.Patience, func() bool {
					runs, err := ReadHistory(context.Background(), history.pool, table, "job", 10)
					_, ok := runOf(runs, tick)
					return err == nil && ok
				})
				if !committed {
					t.Errorf("the claim of %s did not commit within %s", tick, pgtest.Patience)
				}
			}()
		})
	}
	ran := make(chan Tick, 10)
	err := s.AddSchedule("job", sched, func(ctx context.Context) error {
		tick, _ := TickOf(ctx)
		ran <- tick
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	runs := history.wait("job", 1, func(r Run) bool { return r.Tick.Equal(sched.at) && ended(r) })
	r, _ := runOf(runs, sched.at)
	t.Logf("tick %s: %s %q, attempt %d", r.Tick.Format(time.RFC3339Nano), r.Status, r.Error, r.Attempt)
	if r.Status != StatusSucceeded || r.Attempt != 1 {
		t.Errorf("the tick whose claim's reply was lost: %s %q (attempt %d), want it run by its claimer", r.Status, r.Error, r.Attempt)
	}
	if len(ran) != 1 {
		t.Errorf("the function ran %d times, want once", len(ran))
	}
}

// Under Retry, a run that ended lost with its lease runs again once that
// lease has ended on the server, as a dead runner's does.
func TestALostRunIsRetriedUnderRetry(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "r", nil)
	sched := oneTickDue(t, s, "job")
	started := make(chan Tick, 10)
	err := s.AddSchedule("job", sched, func(ctx context.Context) error {
		tick, _ := TickOf(ctx)
		started <- tick
		if tick.Attempt == 1 {
			<-ctx.Done() // the first attempt runs until its lease is lost
			return ctx.Err()
		}
		return nil
	}, OnAbandoned(Retry(2)))
	if err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	first := pgtest.Receive(t, started, "the first run")
	if _, err := admin.ForceRelease(context.Background(), leaseClient(t, table), "cron:job"); err != nil {
		t.Fatal(err)
	}
	second := pgtest.Receive(t, started, "the tick's second attempt")
	if !second.At.Equal(first.At) || second.Attempt != 2 {
		t.Errorf("second run: tick %s attempt %d, want tick %s attempt 2", second.At, second.Attempt, first.At)
	}
	runs := newRunHistory(t, table).wait("job", 1, func(r Run) bool { return r.Tick.Equal(first.At) && ended(r) && r.Attempt == 2 })
	if r, _ := runOf(runs, first.At); r.Status != StatusSucceeded {
		t.Errorf("the retried run: %s %q", r.Status, r.Error)
	}
}

// Running a dead runner's tick again is fenced like a claim: only while
// the new runner's token is on the job's lease row, unexpired by the
// server's clock, so that a replica that stalled in its sweep past its
// lease's end takes no run over.
func TestARetryIsFencedByTheJobsLease(t *testing.T) {
	ctx := context.Background()
	table := tableIn(t)
	s, j := retryingJob(t, table)
	token := holdJobLease(t, table, "job")
	tick := time.Now().Truncate(time.Second).UTC()
	insertRun(t, table, "job", tick, 555, StatusRunning) // its runner's lease row is gone
	retry := func(by int64) (int, error) {
		var attempt int
		err := s.pool.QueryRow(ctx, s.q.RetryRun, j.name, tick, int64(555), by, "r", j.rows).Scan(&attempt)
		return attempt, err
	}
	if _, err := retry(token + 1000); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("a retry under a token that holds no lease: %v, want no row", err)
	}
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), table)
	leases.SetExpiry("cron:job", -time.Millisecond)
	if _, err := retry(token); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("a retry under token %d, whose row expired by the server's clock: %v, want no row", token, err)
	}
	leases.SetExpiry("cron:job", time.Minute)
	if attempt, err := retry(token); err != nil || attempt != 2 {
		t.Errorf("a retry under the holder's token %d: attempt %d, %v; want attempt 2", token, attempt, err)
	}
}
