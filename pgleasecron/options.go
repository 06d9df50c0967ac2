package pgleasecron

import (
	"fmt"
	"time"

	"github.com/pglease/pglease"
)

// MissedPolicy says what a job does with ticks that came while no replica
// ran it (see the package documentation): [RunOnce], [Skip] or [RunAll].
type MissedPolicy struct {
	kind missedKind
	n    int
}

type missedKind int

const (
	missedRunOnce missedKind = iota
	missedSkip
	missedRunAll
)

var (
	// RunOnce runs the latest missed tick once; the others are counted in
	// its run's Missed. The default.
	RunOnce = MissedPolicy{kind: missedRunOnce}
	// Skip runs no missed tick: one history row with status "missed"
	// counts them, and the job waits for its next tick.
	Skip = MissedPolicy{kind: missedSkip}
)

// RunAll runs each of the latest n missed ticks, oldest first (n at least
// 1); older ones are counted in the first run's Missed.
func RunAll(n int) MissedPolicy { return MissedPolicy{kind: missedRunAll, n: n} }

func (p MissedPolicy) String() string {
	switch p.kind {
	case missedSkip:
		return "skip"
	case missedRunAll:
		return fmt.Sprintf("run all (at most %d)", p.n)
	}
	return "run once"
}

// OverlapPolicy says what a job does with a tick that comes while its
// previous run is still going.
type OverlapPolicy int

const (
	// SkipOverlap records the tick as skipped. The default.
	SkipOverlap OverlapPolicy = iota
	// QueueOverlap makes the tick wait for the previous run to end, then
	// handles the ticks due (more than one, or one later than the
	// tolerance, are missed ticks: see [MissedPolicy]).
	QueueOverlap
)

func (p OverlapPolicy) String() string {
	if p == QueueOverlap {
		return "queue"
	}
	return "skip"
}

// AbandonedPolicy says what happens to a tick whose runner died, or whose
// run was lost with its lease (the runner cut off from the database),
// before its run ended.
type AbandonedPolicy struct{ attempts int }

// Leave records a dead runner's tick as abandoned, and leaves a lost run
// lost: the tick ran at most once. The default.
var Leave = AbandonedPolicy{attempts: 1}

// Retry runs a dead runner's tick, or a lost run's, again on the first
// replica that holds the job's lease after the runner's lease ended on the
// server, up to attempts runs in all (1 to 100; Retry(1) is Leave); then a
// dead runner's is recorded as abandoned and a lost one stays lost. A tick
// then runs at least once, but a run that died may have done part of its
// work.
func Retry(attempts int) AbandonedPolicy { return AbandonedPolicy{attempts: attempts} }

func (p AbandonedPolicy) String() string {
	if p.attempts <= 1 {
		return "leave"
	}
	return fmt.Sprintf("retry (at most %d attempts)", p.attempts)
}

// An Option configures one job (see [Scheduler.Add]).
type Option func(*jobOptions)

type jobOptions struct {
	missed    MissedPolicy
	overlap   OverlapPolicy
	abandoned AbandonedPolicy
	loc       *time.Location
	lease     []pglease.Option
}

// OnMissed sets the job's missed-tick policy (default [RunOnce]).
func OnMissed(p MissedPolicy) Option { return func(o *jobOptions) { o.missed = p } }

// OnOverlap sets the job's overlap policy (default [SkipOverlap]).
func OnOverlap(p OverlapPolicy) Option { return func(o *jobOptions) { o.overlap = p } }

// OnAbandoned sets the job's policy for a tick whose runner died (default
// [Leave]).
func OnAbandoned(p AbandonedPolicy) Option { return func(o *jobOptions) { o.abandoned = p } }

// InLocation reads the job's cron expression in loc (default UTC) unless the
// expression names its own zone with CRON_TZ=.
func InLocation(loc *time.Location) Option { return func(o *jobOptions) { o.loc = loc } }

// LeaseOptions are the options of the job's lease: pglease.WithTTL,
// pglease.WithFastFailover and pglease.WithMetadata; by default the
// client's TTL. [Scheduler.Add] refuses the options that would break the
// rule that a job has one runner at a time: pglease.WithSlots (more than
// one slot), which lets several replicas hold the job's lease at once, and
// pglease.WithMinHold (more than 0), which keeps the lease held after a run
// ended, so that later ticks wait for the hold instead of following the
// overlap policy (a tick is claimed once in the database, however the
// replicas' clocks disagree: a minimum hold adds nothing to that).
func LeaseOptions(opts ...pglease.Option) Option {
	return func(o *jobOptions) { o.lease = append(o.lease, opts...) }
}

func (o jobOptions) check() error {
	if o.missed.kind == missedRunAll && o.missed.n < 1 {
		return invalid("RunAll(%d): n must be at least 1", o.missed.n)
	}
	if o.overlap != SkipOverlap && o.overlap != QueueOverlap {
		return invalid("unknown overlap policy %d: use SkipOverlap or QueueOverlap", int(o.overlap))
	}
	if o.abandoned.attempts < 1 || o.abandoned.attempts > 100 {
		return invalid("Retry(%d): attempts must be between 1 and 100", o.abandoned.attempts)
	}
	return nil
}

// checkLease checks the job's lease options against the client's
// configuration and returns the names of the rows the job's lease is held
// as, and its timing.
func checkLease(cfg pglease.Config, lease string, opts []pglease.Option) ([]string, pglease.Plan, error) {
	sc, err := cfg.Plan(lease, opts...)
	if err != nil {
		return nil, sc, refused("LeaseOptions", err)
	}
	rows := sc.Names
	if len(rows) != 1 {
		return nil, sc, invalid("LeaseOptions: pglease.WithSlots(%d) would let %d replicas hold the job's lease, and run ticks, at once: "+
			"a job has one runner at a time; drop WithSlots (OnOverlap says what a tick does while a run goes on)", len(rows), len(rows))
	}
	if sc.MinHold > 0 {
		return nil, sc, invalid("LeaseOptions: pglease.WithMinHold(%s) would keep the job's lease held after each run, "+
			"and the next ticks would wait for the hold instead of following the overlap policy: drop WithMinHold "+
			"(a tick is claimed once in the database, however the replicas' clocks disagree)", sc.MinHold)
	}
	return rows, sc, nil
}
