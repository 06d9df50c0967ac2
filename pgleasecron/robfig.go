package pgleasecron

import (
	"context"
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
// schedule is read as by [Parse] (give InLocation for robfig's
// cron.WithLocation); it names the ticks, and robfig's firing only tells a
// replica when to look: a replica whose Cron fires a tick first waits for
// the server's clock to reach it, one that fires later finds the tick
// taken and skips it, so replicas whose clocks or goroutines disagree by
// up to half the schedule's period (and at most Config.Tolerance) never run
// a tick twice. A tick that no replica's Cron fired is a missed tick, run
// or skipped by [OnMissed] at the next firing. The jobs of Wrap need no
// [Scheduler.Run]; call [Scheduler.Close] once the Crons have stopped.
//
// The wrapped job runs its Run method, or RunContext if it is a
// [ContextJob]. Wrap registers name like Add, and must come before Run.
func (s *Scheduler) Wrap(name, schedule string, opts ...Option) (cron.JobWrapper, error) {
	o := jobOptions{missed: RunOnce, overlap: SkipOverlap, abandoned: Leave}
	for _, opt := range opts {
		opt(&o)
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
	return func(inner cron.Job) cron.Job {
		return cron.FuncJob(func() { j.fired(s.wrapped, inner) })
	}, nil
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
	run.fn = func(ctx context.Context) error {
		if cj, ok := inner.(ContextJob); ok {
			return cj.RunContext(ctx)
		}
		inner.Run()
		return nil
	}
	if _, err := run.handle(ctx, last); err != nil && ctx.Err() == nil {
		s.log.Warn("pgleasecron: handling a tick failed", "job", j.name, "err", err)
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
