package pgleasecron

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
)

// ContextJob is a robfig/cron job that wants the tick's context: a job
// wrapped by [Scheduler.Wrap] that implements it runs RunContext instead
// of Run. The context ends when the job's lease is lost or the Scheduler
// is closed; [TickOf] gives the tick and the fencing token; a returned
// error (or a panic) is recorded as the run's outcome, as with
// [Scheduler.Add].
type ContextJob interface {
	cron.Job
	RunContext(ctx context.Context) error
}

// Wrap returns a robfig/cron v3 JobWrapper for users who keep robfig's
// scheduler: every replica adds the same job to its own cron.Cron with the
// same spec, wrapped, and each tick of it runs on one replica, with the
// guarantees of [Scheduler.Add]: a tick is claimed once, by the server's
// clock, under the job's lease, and recorded in the job's history
// ([Scheduler.History], pglease jobs).
//
//	wrap, err := s.Wrap("sync-prices", "*/5 * * * *")
//	c := cron.New()
//	c.AddJob("*/5 * * * *", cron.NewChain(wrap).Then(job))
//	c.Start()
//
// schedule is read as by [Parse], in the local time zone as robfig's
// cron.New reads its specs (give InLocation for robfig's
// cron.WithLocation, and on replicas whose local zones differ, so that
// they name the same ticks); it names the ticks, and robfig's firing only tells a
// replica when to look: a replica whose Cron fires a tick first waits for
// the server's clock to reach it, one that fires later finds the tick
// taken and skips it, so replicas whose clocks or goroutines disagree by
// up to half the schedule's period (and at most Config.Tolerance) never run
// a tick twice. A tick that no replica's Cron fired is a missed tick, run
// or skipped by [OnMissed] at the next firing. The jobs of Wrap need no
// [Scheduler.Run]; call [Scheduler.Close] once the Crons have stopped.
//
// The wrapped job runs its Run method, or RunContext if it is a
// [ContextJob]. A panic of the job is recorded as the run's outcome (a
// failed run) and then raised again, once the job's lease is released,
// so that robfig's cron.Recover logs it, or, without it, the program
// crashes as robfig's Cron would have let it. Wrap registers name like
// Add, and must come before Run.
//
// The JobWrapper wraps one job: the job registered as name. Applied to a
// second job (one chain given to two AddJob calls), it panics, naming the
// job, as the two would otherwise share one job's ticks and only one of
// them would run; call Wrap once per job, each with a name of its own.
func (s *Scheduler) Wrap(name, schedule string, opts ...Option) (cron.JobWrapper, error) {
	o := jobOptions{missed: RunOnce, overlap: SkipOverlap, abandoned: Leave}
	for _, opt := range opts {
		opt(&o)
	}
	if o.loc == nil {
		if o.loc = localZone(os.Getenv, os.Readlink); o.loc == nil {
			return nil, &InvalidError{Job: name, Reason: "the local time zone, in which robfig's cron.New reads its specs, has no IANA name to record with the schedule (neither $TZ nor /etc/localtime names one): give InLocation, as cron.WithLocation"}
		}
	}
	sched, err := Parse(schedule, o.loc)
	if err != nil {
		return nil, forJob(name, err)
	}
	j, err := s.add(name, sched, func(context.Context) error { return nil }, o)
	if err != nil {
		return nil, err
	}
	j.wrapped = true
	var wrapped atomic.Bool
	return func(inner cron.Job) cron.Job {
		if wrapped.Swap(true) {
			panic(fmt.Sprintf("pgleasecron: the JobWrapper of job %q wraps a second job: it would share the first one's ticks, and only one of them would run; call Scheduler.Wrap once per job, each with a name of its own", name))
		}
		return cron.FuncJob(func() { j.fired(s.wrapped, inner) })
	}, nil
}

// localZone is the zone robfig's cron.New reads specs in, time.Local, by
// its IANA name, so that it can be recorded with the schedule and read
// back by every replica and by pglease jobs: $TZ's zone when set, else
// the zone /etc/localtime links to, else UTC when the local clock is UTC;
// nil when none of them names it.
func localZone(getenv func(string) string, readlink func(string) (string, error)) *time.Location {
	if tz := strings.TrimPrefix(getenv("TZ"), ":"); tz != "" {
		if loc, err := time.LoadLocation(tz); err == nil {
			return loc
		}
		return nil
	}
	if link, err := readlink("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(link, "zoneinfo/"); ok {
			if loc, err := time.LoadLocation(name); err == nil {
				return loc
			}
		}
	}
	year := time.Now().Year()
	for _, m := range []time.Month{time.January, time.July} {
		if _, off := time.Date(year, m, 1, 0, 0, 0, 0, time.Local).Zone(); off != 0 {
			return nil
		}
	}
	return time.UTC
}

// fired handles a firing of robfig's Cron for the wrapped job: it waits,
// if it must, for the server's clock to reach the job's next tick, then
// handles it as the job's loop would.
func (j *job) fired(ctx context.Context, inner cron.Job) {
	s := j.s
	if err := s.prepareOnce(ctx); err != nil {
		s.log.Warn("pgleasecron: preparing the tables failed; this firing is skipped", "job", j.name, "err", err)
		return
	}
	last, err := j.register(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("pgleasecron: reading the job failed; this firing is skipped", "job", j.name, "err", err)
		}
		return
	}
	next := j.sched.Next(last)
	if next.IsZero() {
		return
	}
	if wait := next.Sub(s.clock.now()); wait > 0 {
		// Fired before the server's clock reached the tick: this replica's
		// clock runs ahead, or its Cron fired early. Wait for the tick
		// when it is this firing's; later ones have firings of their own.
		if wait > j.earlyBound(next) || !sleep(ctx, wait) {
			return
		}
	}
	run := *j
	var panicked any // the job's panic, raised again once the run is recorded
	run.fn = func(ctx context.Context) (err error) {
		defer func() {
			if p := recover(); p != nil {
				panicked = p
				err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		if cj, ok := inner.(ContextJob); ok {
			return cj.RunContext(ctx)
		}
		inner.Run()
		return nil
	}
	if _, err := run.handle(ctx, last); err != nil && ctx.Err() == nil {
		s.log.Warn("pgleasecron: handling a tick failed", "job", j.name, "err", err)
	}
	if panicked != nil {
		panic(panicked)
	}
}

// earlyBound is how long before the tick next a firing still counts as
// next's: half the schedule's period there, at most Config.Tolerance.
func (j *job) earlyBound(next time.Time) time.Duration {
	bound := j.s.cfg.Tolerance
	if after := j.sched.Next(next); !after.IsZero() {
		bound = min(bound, after.Sub(next)/2)
	}
	return bound
}

// prepareOnce is Run's prepare, for the jobs of Wrap: once it succeeded,
// never again.
func (s *Scheduler) prepareOnce(ctx context.Context) error {
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	if ready {
		return nil
	}
	if err := s.prepare(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	return nil
}
