package pgleasecron

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// splayed delays each firing of a job by up to d, as replicas whose Crons
// disagree would.
func splayed(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			time.Sleep(rand.N(d))
			j.Run()
		})
	}
}

// startCron starts a robfig Cron (with seconds) running job every second,
// through wrappers, and stops it when the test ends.
func startCron(t *testing.T, job cron.Job, wrappers ...cron.JobWrapper) {
	t.Helper()
	c := cron.New(cron.WithSeconds())
	if _, err := c.AddJob("* * * * * *", cron.NewChain(wrappers...).Then(job)); err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(func() { <-c.Stop().Done() })
}

// Three replicas, with clocks 0, +2 s and -2 s off, keep robfig's Cron;
// each firing comes up to 400 ms late. Every tick runs once, on one of
// them, with its tick and lease in the context of a ContextJob.
func TestWrapRunsEachTickOnce(t *testing.T) {
	table := tableIn(t)
	var mu sync.Mutex
	ran := map[int64][]string{}
	for i, skew := range []time.Duration{0, 2 * time.Second, -2 * time.Second} {
		owner := fmt.Sprintf("replica-%d", i)
		s := newScheduler(t, table, owner, func(c *Config) {
			c.Clock = func() time.Time { return time.Now().Add(skew) }
		})
		t.Cleanup(func() { _ = s.Close() }) // after the Cron has stopped (cleanups run last first)
		wrap, err := s.Wrap("wrapped", "@every 1s")
		if err != nil {
			t.Fatal(err)
		}
		startCron(t, contextJob(func(ctx context.Context) error {
			tick, ok := TickOf(ctx)
			if !ok || tick.Job != "wrapped" || tick.Lease == nil || tick.Lease.Token() <= 0 {
				return fmt.Errorf("TickOf: %+v, %v", tick, ok)
			}
			mu.Lock()
			ran[tick.At.UnixNano()] = append(ran[tick.At.UnixNano()], owner)
			mu.Unlock()
			return nil
		}), splayed(400*time.Millisecond), wrap)
	}
	runs := newRunHistory(t, table).wait("wrapped", 6, ended)
	mu.Lock()
	defer mu.Unlock()
	checkTicks(t, runs, ran, time.Second)
}

// A plain robfig job runs its Run method; its runs are recorded; Run with
// only wrapped jobs says so; Wrap refuses what Add refuses.
func TestWrapRunsAPlainJob(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "replica", nil)
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Wrap("bad", "not a schedule"); !errors.As(err, new(*InvalidError)) {
		t.Fatalf("Wrap with a bad schedule: %v", err)
	}
	wrap, err := s.Wrap("plain", "@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wrap("plain", "@every 1s"); !errors.As(err, new(*InvalidError)) {
		t.Fatalf("Wrap of a name taken: %v", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("Run with only wrapped jobs succeeded")
	}
	var count atomic.Int64
	c := cron.New(cron.WithSeconds())
	if _, err := c.AddJob("* * * * * *", wrap(cron.FuncJob(func() { count.Add(1) }))); err != nil {
		t.Fatal(err)
	}
	c.Start()
	h := newRunHistory(t, table)
	h.wait("plain", 2, func(r Run) bool { return r.Status == StatusSucceeded })
	<-c.Stop().Done()
	succeeded := 0
	for _, r := range h.runs("plain") {
		if r.Status == StatusSucceeded {
			succeeded++
		}
	}
	if n := count.Load(); n != int64(succeeded) {
		t.Fatalf("the job ran %d times; %d runs recorded as succeeded", n, succeeded)
	}
}
