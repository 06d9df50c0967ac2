package pgleasecron

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(replicaEnv) != "" {
		os.Exit(replicaMain())
	}
	pgtest.ExportDatabaseURL = true // for the examples
	pgtest.Main(m)
}

// fast is a schedule of a tick every d (any d: Parse wants 1s or more),
// so that policy tests take a second, not a minute.
func fast(d time.Duration) Schedule { return every{d: d, text: "@every " + d.String()} }

// replica is one scheduler running in this process.
type replica struct {
	s      *Scheduler
	cancel context.CancelFunc
	done   chan error
}

// startReplica runs s until the test ends (or stop is called).
func startReplica(t *testing.T, s *Scheduler) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		r.done <- nil // stop is idempotent
	case <-time.After(pgtest.Patience):
		t.Fatalf("Run did not return within %v of its context's end", pgtest.Patience)
	}
	r.s.Close()
}

// newScheduler returns a scheduler on its own pool (a replica of its own)
// in table.
func newScheduler(t *testing.T, table, owner string, mod func(*Config)) *Scheduler {
	t.Helper()
	pool := pgtest.Pool(t)
	cfg := Config{Config: pglease.Config{Table: table, Owner: owner, TTL: 3 * time.Second}}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runHistory reads the run history of a lease table for one test, on one
// connection of its own, closed when the test ends: the tests poll it
// every few milliseconds (wait), and a pool opened per read kept every
// read's connection until the test ended, hundreds within seconds, until
// the server refused connections (53300, too many clients).
type runHistory struct {
	t     *testing.T
	table string
	app   string // the connection's application_name (pgtest.Backends)
	pool  *pgxpool.Pool
}

func newRunHistory(t *testing.T, table string) *runHistory {
	t.Helper()
	app := pgtest.AppName("pgleasecron history")
	return &runHistory{t: t, table: table, app: app, pool: pgtest.AppPool(t, app)}
}

// runs reads a job's runs, oldest first.
func (h *runHistory) runs(job string) []Run {
	h.t.Helper()
	runs, err := ReadHistory(context.Background(), h.pool, h.table, job, 10_000)
	if err != nil {
		h.t.Fatal(err)
	}
	slices.Reverse(runs)
	return runs
}

// wait waits until the job has at least n rows that satisfy ok.
func (h *runHistory) wait(job string, n int, ok func(Run) bool) []Run {
	h.t.Helper()
	var runs []Run
	pgtest.WaitFor(h.t, pgtest.Patience, fmt.Sprintf("%d runs of %s", n, job), func() bool {
		runs = h.runs(job)
		c := 0
		for _, r := range runs {
			if ok(r) {
				c++
			}
		}
		return c >= n
	})
	return runs
}

func ended(r Run) bool { return r.Status != StatusRunning }

// setLastTick moves a job's last tick, as if no replica had run it since.
func setLastTick(t *testing.T, table, job string, ago time.Duration) {
	t.Helper()
	pgtest.Exec(t, fmt.Sprintf(`INSERT INTO %s_jobs (job, schedule, last_tick, registered_at, seen_at)
		VALUES ($1, 'test', now() - $2::interval, now(), now())
		ON CONFLICT (job) DO UPDATE SET last_tick = excluded.last_tick`, table), job, ago.String())
}

// tableIn names a lease table in a fresh schema.
func tableIn(t *testing.T) string { return pgtest.Schema(t) + ".leases" }

func TestEveryTickRunsOnceOnThreeReplicas(t *testing.T) {
	table := tableIn(t)
	var mu sync.Mutex
	ran := map[int64][]string{}  // by tick, in ns since the epoch
	tokens := map[int64]string{} // the replica that ran with each lease token
	for i, skew := range []time.Duration{0, 2 * time.Second, -2 * time.Second} {
		owner := fmt.Sprintf("replica-%d", i)
		s := newScheduler(t, table, owner, func(c *Config) {
			c.Clock = func() time.Time { return time.Now().Add(skew) }
		})
		err := s.AddSchedule("tick", fast(200*time.Millisecond), func(ctx context.Context) error {
			tick, ok := TickOf(ctx)
			if !ok || tick.Job != "tick" || tick.Lease == nil || tick.Attempt != 1 {
				return fmt.Errorf("TickOf: %+v, %v", tick, ok)
			}
			mu.Lock()
			defer mu.Unlock()
			ran[tick.At.UnixNano()] = append(ran[tick.At.UnixNano()], owner)
			// A replica that catches up runs its missed ticks under one
			// lease (one token); two replicas never share a token.
			if other, ok := tokens[tick.Lease.Token()]; ok && other != owner {
				return fmt.Errorf("token %d used by %s and %s", tick.Lease.Token(), other, owner)
			}
			tokens[tick.Lease.Token()] = owner
			return nil
		},
			// A replica woken late on a loaded machine runs the ticks it
			// missed, and one that finds the previous tick's run still going
			// (a run that outlasts the 200 ms period on a loaded machine)
			// waits for it rather than record this tick as skipped: what
			// this test checks is that each tick runs once, not the overlap
			// policy (TestOverlapPolicies does).
			OnMissed(RunAll(10)), OnOverlap(QueueOverlap))

		if err != nil {
			t.Fatal(err)
		}
		startReplica(t, s)
	}
	runs := newRunHistory(t, table).wait("tick", 30, ended)
	mu.Lock()
	defer mu.Unlock()
	checkTicks(t, runs, ran, 200*time.Millisecond)
}

// checkTicks checks that the runs cover consecutive ticks of step, each
// run once (by the runs table and by the functions' own record), and that
// none was claimed before its instant by the server's clock.
func checkTicks(t *testing.T, runs []Run, ran map[int64][]string, step time.Duration) {
	t.Helper()
	var doubled, lost, succeeded int
	for i, r := range runs {
		if i > 0 {
			if gap := r.Tick.Sub(runs[i-1].Tick); gap != step {
				lost += int(gap/step) - 1
				t.Errorf("tick %s follows %s: %d lost", r.Tick, runs[i-1].Tick, int(gap/step)-1)
			}
		}
		if r.ClaimedAt.Before(r.Tick) {
			t.Errorf("tick %s claimed at %s, before its instant by the server's clock", r.Tick, r.ClaimedAt)
		}
		if r.Status == StatusSucceeded {
			succeeded++
		}
		if r.Status != StatusRunning && r.Status != StatusSucceeded {
			t.Errorf("tick %s: %s %s", r.Tick, r.Status, r.Error)
		}
		if n := len(ran[r.Tick.UnixNano()]); n != 1 && r.Status == StatusSucceeded {
			doubled += max(n-1, 0)
			t.Errorf("tick %s ran %d times: %v", r.Tick, n, ran[r.Tick.UnixNano()])
		}
	}
	for at, by := range ran {
		if !slices.ContainsFunc(runs, func(r Run) bool { return r.Tick.UnixNano() == at }) {
			t.Errorf("tick %s ran (%v) without a row", time.Unix(0, at).UTC(), by)
		}
	}
	t.Logf("ticks: %d expected, %d succeeded, %d doubled, %d lost (first %s, last %s)",
		len(runs)+lost, succeeded, doubled, lost, runs[0].Tick.Format(time.RFC3339Nano), runs[len(runs)-1].Tick.Format(time.RFC3339Nano))
}

func TestAReplicaWhoseClockIsBehindIsNotLate(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "late-clock", func(c *Config) {
		c.Clock = func() time.Time { return time.Now().Add(-30 * time.Second) }
	})
	if err := s.Add("behind", "@every 1s", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	runs := newRunHistory(t, table).wait("behind", 3, ended)
	for _, r := range runs {
		// By its own clock the replica is 30 s early for every tick; by
		// the server's it is on time. (The bound is far from both.)
		if lag := r.StartedAt.Sub(r.Tick); lag < 0 || lag > 15*time.Second {
			t.Errorf("tick %s started %v after its instant", r.Tick, lag)
		}
	}
}

func TestMissedTickPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy MissedPolicy
		check  func(t *testing.T, runs []Run)
	}{
		{"RunOnce", RunOnce, func(t *testing.T, runs []Run) {
			r := runs[0]
			if r.Status != StatusSucceeded || r.Missed < 8 {
				t.Errorf("first row: %+v, want the latest missed tick run once, standing for the others", r)
			}
		}},
		{"Skip", Skip, func(t *testing.T, runs []Run) {
			r := runs[0]
			if r.Status != StatusMissed || r.Missed < 8 || !strings.Contains(r.Error, "skips them") {
				t.Errorf("first row: %+v, want one missed row counting them", r)
			}
			if runs[1].Status != StatusSucceeded || runs[1].Tick.Sub(r.Tick) != time.Second {
				t.Errorf("after the missed ticks: %+v, want the next tick run", runs[1])
			}
		}},
		{"RunAll", RunAll(3), func(t *testing.T, runs []Run) {
			for i, r := range runs[:3] {
				if r.Status != StatusSucceeded {
					t.Errorf("row %d: %+v, want run", i, r)
				}
				if i > 0 && r.Tick.Sub(runs[i-1].Tick) != time.Second {
					t.Errorf("row %d: tick %s after %s, want the latest 3 in order", i, r.Tick, runs[i-1].Tick)
				}
			}
			if runs[0].Missed < 6 || runs[1].Missed != 0 {
				t.Errorf("missed counts %d, %d: want the older ticks on the first run", runs[0].Missed, runs[1].Missed)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := tableIn(t)
			s := newScheduler(t, table, "r", nil)
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			setLastTick(t, table, "job", 10*time.Second) // every replica down for 10 ticks
			if err := s.Add("job", "@every 1s", func(context.Context) error { return nil }, OnMissed(tc.policy)); err != nil {
				t.Fatal(err)
			}
			startReplica(t, s)
			runs := newRunHistory(t, table).wait("job", 4, ended)
			tc.check(t, runs)
		})
	}
}

func TestOverlapPolicies(t *testing.T) {
	const step = 300 * time.Millisecond
	for _, policy := range []OverlapPolicy{SkipOverlap, QueueOverlap} {
		t.Run(policy.String(), func(t *testing.T) {
			table := tableIn(t)
			var mu sync.Mutex
			running := 0
			overlaps := 0
			fn := func(ctx context.Context) error {
				mu.Lock()
				running++
				if running > 1 {
					overlaps++
				}
				mu.Unlock()
				defer func() { mu.Lock(); running--; mu.Unlock() }()
				tick, _ := TickOf(ctx)
				if tick.At.UnixNano()/int64(step)%4 == 0 {
					// Every fourth tick runs for two ticks more.
					sleep(ctx, 2*step+step/2)
				}
				return nil
			}
			for i := range 2 {
				s := newScheduler(t, table, fmt.Sprintf("r%d", i), func(c *Config) { c.Tolerance = time.Hour })
				if err := s.AddSchedule("job", fast(step), fn, OnOverlap(policy)); err != nil {
					t.Fatal(err)
				}
				startReplica(t, s)
			}
			runs := newRunHistory(t, table).wait("job", 12, ended)
			var skipped, ran int
			for i, r := range runs {
				switch r.Status {
				case StatusSkipped:
					skipped++
				case StatusSucceeded:
					ran++
					if i > 0 && runs[i-1].Status == StatusSucceeded && r.StartedAt.Before(runs[i-1].EndedAt) {
						t.Errorf("tick %s started before the run of %s ended", r.Tick, runs[i-1].Tick)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if overlaps > 0 {
				t.Errorf("%d runs overlapped", overlaps)
			}
			t.Logf("%s: %d rows, %d ran, %d skipped", policy, len(runs), ran, skipped)
			switch policy {
			case SkipOverlap:
				if skipped == 0 {
					t.Errorf("no tick was skipped while a long run went on")
				}
			case QueueOverlap:
				if skipped > 0 {
					t.Errorf("%d ticks skipped: queued ticks must wait and run", skipped)
				}
			}
		})
	}
}

// insertDeadRun writes the row of a run whose runner died: running, under
// a token no lease holds.
func insertDeadRun(t *testing.T, table, job string, ago time.Duration) time.Time {
	t.Helper()
	tick := time.Now().Add(-ago).Truncate(time.Second).UTC()
	pgtest.Exec(t, fmt.Sprintf(`INSERT INTO %s_runs (job, tick, status, replica, token, claimed_at, started_at)
		VALUES ($1, $2, 'running', 'dead-replica', 987654321, now(), now())`, table), job, tick)
	return tick
}

func TestAbandonedRunPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy AbandonedPolicy
	}{{"Leave", Leave}, {"Retry", Retry(2)}} {
		t.Run(tc.name, func(t *testing.T) {
			table := tableIn(t)
			s := newScheduler(t, table, "survivor", nil)
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			dead := insertDeadRun(t, table, "job", 5*time.Second)
			var mu sync.Mutex
			var attempts []Tick
			err := s.Add("job", "@every 1h", func(ctx context.Context) error {
				tick, _ := TickOf(ctx)
				mu.Lock()
				attempts = append(attempts, tick)
				mu.Unlock()
				return nil
			}, OnAbandoned(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			startReplica(t, s)
			// Seen while waiting for the next tick (an hour away): the
			// dead runner's lease is gone.
			runs := newRunHistory(t, table).wait("job", 1, ended)
			r := runs[0]
			mu.Lock()
			defer mu.Unlock()
			switch tc.policy {
			case Leave:
				if r.Status != StatusAbandoned || !strings.Contains(r.Error, "dead-replica") || len(attempts) != 0 {
					t.Errorf("%+v, %d runs: want the dead run recorded as abandoned and not run", r, len(attempts))
				}
			default:
				if r.Status != StatusSucceeded || r.Attempt != 2 || r.Replica != "survivor" {
					t.Errorf("%+v: want the dead run retried by the survivor", r)
				}
				if len(attempts) != 1 || !attempts[0].At.Equal(dead) || attempts[0].Attempt != 2 {
					t.Errorf("runs %+v: want the tick %s run again, attempt 2", attempts, dead)
				}
			}
		})
	}
}

func TestALostLeaseEndsTheRunAsLost(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "r", nil)
	started := make(chan Tick, 1)
	err := s.AddSchedule("job", fast(200*time.Millisecond), func(ctx context.Context) error {
		tick, _ := TickOf(ctx)
		select {
		case started <- tick:
		default:
			return nil // only the first run waits
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	tick := pgtest.Receive(t, started, "the first run")
	operator, err := pglease.NewFromPool(pgtest.Pool(t), pglease.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer operator.Close()
	if _, err := admin.ForceRelease(context.Background(), operator, "cron:job"); err != nil {
		t.Fatal(err)
	}
	newRunHistory(t, table).wait("job", 1, func(r Run) bool { return r.Tick.Equal(tick.At) && r.Status == StatusLost })
}

func TestFailuresAndPanicsAreRecorded(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "r", nil)
	n := 0
	err := s.AddSchedule("job", fast(200*time.Millisecond), func(ctx context.Context) error {
		n++
		if n%2 == 0 {
			panic("boom")
		}
		return errors.New("disk full")
	})
	if err != nil {
		t.Fatal(err)
	}
	startReplica(t, s)
	runs := newRunHistory(t, table).wait("job", 4, ended)
	var failed, panicked int
	for _, r := range runs {
		if r.Status == StatusFailed && r.Error == "disk full" {
			failed++
		}
		if r.Status == StatusFailed && strings.HasPrefix(r.Error, "panic: boom") {
			panicked++
		}
	}
	if failed == 0 || panicked == 0 {
		t.Errorf("%d failed, %d panicked: %+v", failed, panicked, runs)
	}
}
