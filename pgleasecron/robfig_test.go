package pgleasecron

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// recoverLog is a cron.Logger that keeps what robfig's cron.Recover logs.
type recoverLog struct {
	mu     sync.Mutex
	errors []string
}

func (l *recoverLog) Info(string, ...any) {}
func (l *recoverLog) Error(err error, msg string, _ ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, msg+": "+err.Error())
}

func (l *recoverLog) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errors)
}

// Wrap behaves as robfig's own wrappers do: a panic of the job reaches the
// chain's cron.Recover (after the run is recorded as failed and its lease
// released, so the next tick runs); the first firing of a newly
// registered job runs its tick; one wrapper given to a second job panics
// at once, naming the job, rather than merging the two.
func TestWrapFollowsRobfig(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "replica", nil)
	t.Cleanup(func() { _ = s.Close() })

	wrap, err := s.Wrap("panics", "@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	log := &recoverLog{}
	var first atomic.Int64 // when robfig first fired the job, in Unix nanoseconds
	counting := func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { first.CompareAndSwap(0, time.Now().UnixNano()); j.Run() })
	}
	c := cron.New(cron.WithSeconds())
	if _, err := c.AddJob("* * * * * *", cron.NewChain(cron.Recover(log), counting, wrap).Then(cron.FuncJob(func() { panic("boom") }))); err != nil {
		t.Fatal(err)
	}
	c.Start()
	h := newRunHistory(t, table)
	runs := h.wait("panics", 2, func(r Run) bool { return r.Status == StatusFailed })
	<-c.Stop().Done()
	if !strings.Contains(runs[0].Error, "panic: boom") {
		t.Errorf("the run of a panicking job: %+v; want it failed with the panic", runs[0])
	}
	if got := log.logged(); len(got) < 2 || !strings.Contains(got[0], "panic: boom") {
		t.Errorf("cron.Recover logged %q; want each panic", got)
	}
	// The new job's first firing ran its tick: the second robfig fired
	// it in (the test's clock is the server's).
	if f := time.Unix(0, first.Load()); runs[0].Tick.After(f) || !runs[0].Tick.After(f.Add(-time.Second)) {
		t.Errorf("the first run is of the tick %s; robfig first fired the job at %s, for the tick before", runs[0].Tick, f)
	}

	second, err := s.Wrap("one-job", "@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	second(cron.FuncJob(func() {}))
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), `job "one-job" wraps a second job`) {
				t.Errorf("the wrapper of one job given a second: panic %v; want one naming the job", p)
			}
		}()
		second(cron.FuncJob(func() {}))
	}()
}

// Wrap reads a schedule in the local time zone, as robfig's cron.New
// reads its specs, and records it by its IANA name; a local zone without
// one is refused, pointing at InLocation.
func TestWrapReadsSchedulesInTheLocalZone(t *testing.T) {
	table := tableIn(t)
	s := newScheduler(t, table, "replica", nil)
	t.Cleanup(func() { _ = s.Close() })
	t.Setenv("TZ", "Europe/Berlin")
	if _, err := s.Wrap("berlin", "0 3 * * *"); err != nil {
		t.Fatal(err)
	}
	if got := s.byName["berlin"].sched.String(); got != "CRON_TZ=Europe/Berlin 0 3 * * *" {
		t.Errorf("Wrap's schedule with TZ=Europe/Berlin: %q", got)
	}
	if _, err := s.Wrap("utc", "0 3 * * *", InLocation(time.UTC)); err != nil || s.byName["utc"].sched.String() != "0 3 * * *" {
		t.Errorf("Wrap InLocation(UTC): %v, %q", err, s.byName["utc"].sched.String())
	}
	t.Setenv("TZ", "Nowhere/Atlantis")
	if _, err := s.Wrap("nowhere", "0 3 * * *"); !errors.As(err, new(*InvalidError)) || !strings.Contains(err.Error(), "InLocation") {
		t.Errorf("Wrap in a local zone without an IANA name: %v; want an *InvalidError pointing at InLocation", err)
	}
	none := func(string) string { return "" }
	link := func(string) (string, error) { return "/usr/share/zoneinfo/America/New_York", nil }
	if loc := localZone(none, link); loc == nil || loc.String() != "America/New_York" {
		t.Errorf("localZone from /etc/localtime: %v", loc)
	}
}
