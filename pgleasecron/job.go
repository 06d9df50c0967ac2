package pgleasecron

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease"
)

// job is one registered job on this replica.
type job struct {
	s     *Scheduler
	name  string
	lease string   // the job's lease name
	rows  []string // the names of its rows in the lease table (pglease.Config.Plan)
	sched Schedule
	fn    func(context.Context) error
	o     jobOptions
	check time.Duration // how often a waiting replica looks for dead runners
	// wrapped: a job of Wrap, whose ticks robfig's Cron starts (robfig.go)
	// rather than loop
	wrapped bool
}

// Tick is the tick a job's function runs (see [TickOf]).
type Tick struct {
	Job string
	// At is the scheduled instant, in UTC.
	At time.Time
	// Attempt is 1, or more when the tick runs again after its runner died
	// (see [Retry]).
	Attempt int
	// Missed counts the earlier ticks this run stands for (see
	// [MissedPolicy]).
	Missed int64
	// Lease is the job's lease, held while the function runs; its Token is
	// the run's fencing token.
	Lease *pglease.Lease
}

type tickKey struct{}

// TickOf returns the tick a job's function runs, from the context the
// scheduler gave it.
func TickOf(ctx context.Context) (Tick, bool) {
	t, ok := ctx.Value(tickKey{}).(Tick)
	return t, ok
}

// registerFirst registers the job before Run starts its loop: errors the
// server answers a retry would not mend (a privilege the role lacks, a
// table missing or of another shape) are returned, naming the job and the
// tables; others (the server unreachable or restarting) are logged and
// retried until ctx ends, when it returns a zero time and no error.
func (j *job) registerFirst(ctx context.Context) (time.Time, error) {
	for {
		last, err := j.register(ctx)
		switch {
		case err == nil:
			return last, nil
		case serverRefused(err):
			hint := ""
			if lacksPrivilege(err) {
				hint = fmt.Sprintf(" (grant the role SELECT, INSERT, UPDATE and DELETE on %s and %s, beside its privileges on the lease table: see pglease's docs/OPERATIONS.md)", j.s.q.jobs, j.s.q.runs)
			}
			return time.Time{}, fmt.Errorf("pgleasecron: job %q: register the job in %s: %w%s", j.name, j.s.q.jobs, err, hint)
		case !j.backoff(ctx, "register the job", err):
			return time.Time{}, nil
		}
	}
}

// lacksPrivilege reports whether err is the server's refusal for want of
// a privilege (SQLSTATE 42501).
func lacksPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// serverRefused reports whether err is the server's answer to a statement it
// will refuse again, whatever the retries: one of SQLSTATE classes 42
// (a privilege, a missing or changed object) and 3F (a missing schema).
func serverRefused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "42") || strings.HasPrefix(pe.Code, "3F"))
}

// loop runs the job on this replica until ctx ends, from its last tick
// (registerFirst's).
func (j *job) loop(ctx context.Context, last time.Time) {
	var err error
	for ctx.Err() == nil {
		next := j.sched.Next(last)
		if next.IsZero() {
			<-ctx.Done() // the schedule has no more instants
			return
		}
		if wait := next.Sub(j.s.clock.now()); wait > 0 {
			// Sleep until the tick, looking for dead runners meanwhile.
			if !sleep(ctx, min(wait, j.check)) {
				return
			}
			if wait > j.check {
				if err := j.sweepIfOrphaned(ctx); err != nil && ctx.Err() == nil {
					j.s.log.Warn("pgleasecron: looking for abandoned runs failed", "job", j.name, "err", err)
				}
			}
			continue
		}
		if last, err = j.handle(ctx, last); err != nil && !j.backoff(ctx, "handle a tick", err) {
			return
		}
	}
}

// checkEvery is how often a waiting replica looks for runs whose runner
// died: the job lease's TTL, at most a minute.
func checkEvery(ttl time.Duration) time.Duration {
	return max(min(ttl, time.Minute), time.Second)
}

// backoff logs err and waits a second or two before the next try. It
// reports false when ctx ended.
func (j *job) backoff(ctx context.Context, what string, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	j.s.log.Warn("pgleasecron: "+what+" failed; retrying", "job", j.name, "err", err)
	return sleep(ctx, time.Second+rand.N(time.Second))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// register makes sure the job's row exists and returns its last tick. A
// job of Wrap, registered by a firing of robfig's Cron, begins its ticks
// the firing's bound before now (earlyBound), so that the tick that
// firing is for is the new job's first rather than a tick before it
// existed.
func (j *job) register(ctx context.Context) (time.Time, error) {
	var last, server time.Time
	var back time.Duration
	if j.wrapped {
		back = j.earlyBound(j.sched.Next(j.s.clock.now()))
	}
	before := j.s.cfg.Clock()
	err := j.s.pool.QueryRow(ctx, j.s.q.RegisterJob, j.name, j.sched.String(), back.Microseconds()).Scan(&last, &server)
	if err != nil {
		return time.Time{}, err
	}
	j.s.clock.observe(before, j.s.cfg.Clock(), server)
	return last, nil
}

// state reads the job's last tick and the server's time.
func (j *job) state(ctx context.Context) (last, now time.Time, err error) {
	before := j.s.cfg.Clock()
	if err := j.s.pool.QueryRow(ctx, j.s.q.JobState, j.name).Scan(&last, &now); err != nil {
		return last, now, err
	}
	j.s.clock.observe(before, j.s.cfg.Clock(), now)
	return last, now, nil
}

// claim tries to claim tick with the given status; see ClaimTick. token
// is that of the job's lease the claimer holds, 0 for a skipped claim
// (made without it). A running claim whose reply is lost is asked after: when it
// was made, claim reports it claimed.
func (j *job) claim(ctx context.Context, tick time.Time, status Status, token int64, missed int64, msg string) (claimed bool, last time.Time, err error) {
	if j.s.beforeClaim != nil {
		j.s.beforeClaim(tick, status, token)
	}
	var tok *int64
	if token > 0 {
		tok = &token
	}
	var server time.Time
	before := j.s.cfg.Clock()
	err = j.s.pool.QueryRow(ctx, j.s.q.ClaimTick, j.name, tick, j.s.client.Owner(), string(status),
		tok, missed, msg, j.s.cfg.History, j.rows).Scan(&claimed, &last, &server)
	if err != nil && status == StatusRunning {
		before = j.s.cfg.Clock()
		claimed, last, server, err = j.claimed(ctx, tick, token, err)
	}
	if err != nil {
		return false, last, fmt.Errorf("claim tick %s: %w", tick.Format(time.RFC3339), err)
	}
	j.s.clock.observe(before, j.s.cfg.Clock(), server)
	if claimed {
		last = tick
	}
	return claimed, last, nil
}

// claimed asks, after a running claim of tick under token failed with
// cerr, whether the claim was made all the same: its reply may have been
// lost after it committed. It waits for the claims the server still runs,
// then reads the tick's row, on a fresh connection and a detached, bounded
// context (Run's ending may be what failed the claim). It returns cerr
// when it cannot tell.
func (j *job) claimed(ctx context.Context, tick time.Time, token int64, cerr error) (claimed bool, last, server time.Time, err error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if _, err := j.s.pool.Exec(rctx, j.s.q.AwaitClaims, j.name); err != nil {
		return false, last, server, cerr
	}
	if err := j.s.pool.QueryRow(rctx, j.s.q.ClaimedTick, j.name, tick, token).Scan(&claimed, &last, &server); err != nil {
		return false, last, server, cerr
	}
	if claimed {
		j.s.log.Info("pgleasecron: a claim's reply was lost, but the claim was made: running the tick", "job", j.name, "tick", tick, "err", cerr)
		return true, last, server, nil
	}
	return false, last, server, cerr
}

// handle deals with the job's next tick, due by the estimate of the
// server's clock, and returns the job's last tick as it then knows it.
func (j *job) handle(ctx context.Context, last time.Time) (time.Time, error) {
	var lease *pglease.Lease
	var err error
	if j.o.overlap == QueueOverlap {
		lease, err = j.s.client.Acquire(ctx, j.lease, j.o.lease...)
	} else {
		lease, err = j.s.client.TryAcquire(ctx, j.lease, j.o.lease...)
	}
	if errors.Is(err, pglease.ErrNotAcquired) {
		return j.skipOverlap(ctx, last)
	}
	if err != nil {
		if ctx.Err() != nil {
			return last, nil
		}
		return last, err
	}
	defer j.release(ctx, lease)
	return j.underLease(ctx, lease)
}

// release gives the job's lease back, even when ctx ended.
func (j *job) release(ctx context.Context, lease *pglease.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if err := lease.Release(rctx); err != nil && !errors.Is(err, pglease.ErrLeaseLost) {
		j.s.log.Warn("pgleasecron: releasing the job's lease failed; it expires by itself", "job", j.name, "err", err)
	}
}

// skipOverlap records the newest due tick as skipped when the job's lease
// is held by the run of an earlier tick. When it is held for another reason
// (another replica took it for this very tick and has yet to claim it), it
// waits a moment and returns the last tick as the database has it.
func (j *job) skipOverlap(ctx context.Context, last time.Time) (time.Time, error) {
	ticks, count := due(j.sched, last, j.s.clock.now(), 1)
	if count == 0 {
		return last, nil
	}
	tick := ticks[len(ticks)-1]
	claimed, newLast, err := j.claim(ctx, tick, StatusSkipped, 0, int64(count-1), "the run of an earlier tick was still going")
	if err != nil || claimed {
		return newLast, err
	}
	if newLast.Before(tick) {
		// Another replica holds the lease for this tick, or is about to
		// run it: look again shortly.
		sleep(ctx, 50*time.Millisecond+rand.N(100*time.Millisecond))
	}
	return newLast, nil
}

// underLease handles the due ticks while holding the job's lease: first
// the runs a dead runner left, then the ticks due by the server's clock.
func (j *job) underLease(ctx context.Context, lease *pglease.Lease) (time.Time, error) {
	if err := j.sweep(ctx, lease); err != nil {
		return time.Time{}, err
	}
	last, now, err := j.state(ctx)
	if err != nil {
		return last, err
	}
	keep := 1
	if j.o.missed.kind == missedRunAll {
		keep = j.o.missed.n
	}
	ticks, count := due(j.sched, last, now, keep)
	if count == 0 {
		return last, nil
	}
	latest := ticks[len(ticks)-1]
	if count == 1 && now.Sub(latest) <= j.s.cfg.Tolerance {
		return j.claimAndRun(ctx, lease, latest, 0)
	}
	earlier := int64(count - len(ticks)) // missed ticks that no row stands for
	switch j.o.missed.kind {
	case missedSkip:
		_, last, err := j.claim(ctx, latest, StatusMissed, lease.Token(), int64(count-1),
			fmt.Sprintf("%d tick(s) came while no replica ran the job; the missed-tick policy skips them", count))
		return last, err
	case missedRunAll:
		for i, t := range ticks {
			missed := int64(0)
			if i == 0 {
				missed = earlier
			}
			if last, err = j.claimAndRun(ctx, lease, t, missed); err != nil || lease.Context().Err() != nil || ctx.Err() != nil {
				return last, err
			}
		}
		return last, nil
	default:
		return j.claimAndRun(ctx, lease, latest, int64(count-1))
	}
}

// claimAndRun claims tick as running under lease and runs it.
func (j *job) claimAndRun(ctx context.Context, lease *pglease.Lease, tick time.Time, missed int64) (time.Time, error) {
	claimed, last, err := j.claim(ctx, tick, StatusRunning, lease.Token(), missed, "")
	if err != nil || !claimed {
		return last, err
	}
	j.run(ctx, lease, Tick{Job: j.name, At: tick.UTC(), Attempt: 1, Missed: missed, Lease: lease})
	return last, nil
}

// run runs the job's function for t and records its outcome.
func (j *job) run(ctx context.Context, lease *pglease.Lease, t Tick) {
	jctx, cancel := context.WithCancelCause(lease.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	err := call(context.WithValue(jctx, tickKey{}, t), j.fn)
	stop()
	cancel(nil)
	status := StatusSucceeded
	switch {
	case lease.Context().Err() != nil:
		status = StatusLost
		err = errors.Join(fmt.Errorf("the job's lease ended while the run went on: %w", context.Cause(lease.Context())), err)
	case err != nil:
		status = StatusFailed
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	fctx, done := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer done()
	if _, ferr := j.s.pool.Exec(fctx, j.s.q.FinishRun, j.name, t.At, lease.Token(), string(status), msg); ferr != nil {
		j.s.log.Warn("pgleasecron: recording a run's outcome failed", "job", j.name, "tick", t.At, "status", status, "err", ferr)
	}
}

// call runs fn, turning a panic into an error.
func call(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx)
}

// orphan is a run row whose runner no longer holds the job's lease: one
// still marked running, or one marked lost that the policy runs again.
type orphan struct {
	tick    time.Time
	token   int64
	replica string
	attempt int
	status  Status
}

// orphans reads the job's orphans, judging each run by its own lease row
// as the lease table names it (see OrphanedRuns).
func (j *job) orphans(ctx context.Context) ([]orphan, error) {
	rows, err := j.s.pool.Query(ctx, j.s.q.OrphanedRuns, j.name, j.rows, j.o.abandoned.attempts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []orphan
	for rows.Next() {
		var o orphan
		if err := rows.Scan(&o.tick, &o.token, &o.replica, &o.attempt, &o.status); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// sweep applies the abandoned-run policy to the runs whose runner no longer
// holds the job's lease (lease is held by this replica).
func (j *job) sweep(ctx context.Context, lease *pglease.Lease) error {
	found, err := j.orphans(ctx)
	if err != nil {
		return fmt.Errorf("look for abandoned runs: %w", err)
	}
	for _, o := range found {
		if o.attempt < j.o.abandoned.attempts {
			var attempt int
			err := j.s.pool.QueryRow(ctx, j.s.q.RetryRun, j.name, o.tick, o.token, lease.Token(), j.s.client.Owner(), j.rows).Scan(&attempt)
			if errors.Is(err, pgx.ErrNoRows) {
				// Another holder took the run over, or this replica's
				// lease has ended (it stalled): not this sweep's any more.
				return nil
			}
			if err != nil {
				return fmt.Errorf("take over the run of tick %s: %w", o.tick.UTC().Format(time.RFC3339), err)
			}
			why := "its runner died"
			if o.status == StatusLost {
				why = "its run was lost with its lease"
			}
			j.s.log.Info("pgleasecron: running a tick again: "+why, "job", j.name, "tick", o.tick, "replica", o.replica, "attempt", attempt)
			j.run(ctx, lease, Tick{Job: j.name, At: o.tick.UTC(), Attempt: attempt, Lease: lease})
			if lease.Context().Err() != nil || ctx.Err() != nil {
				return nil
			}
			continue
		}
		msg := fmt.Sprintf("replica %s lost the job's lease before the run ended (attempt %d)", o.replica, o.attempt)
		if _, err := j.s.pool.Exec(ctx, j.s.q.AbandonRun, j.name, o.tick, o.token, msg); err != nil {
			return fmt.Errorf("record an abandoned run: %w", err)
		}
		j.s.log.Warn("pgleasecron: a run was abandoned: its runner died", "job", j.name, "tick", o.tick, "replica", o.replica)
	}
	return nil
}

// sweepIfOrphaned takes the job's lease and sweeps when a run's runner is
// seen to have lost it, so that a dead runner's tick is dealt with before
// the job's next tick.
func (j *job) sweepIfOrphaned(ctx context.Context) error {
	found, err := j.orphans(ctx)
	if err != nil || len(found) == 0 {
		return err
	}
	lease, err := j.s.client.TryAcquire(ctx, j.lease, j.o.lease...)
	if errors.Is(err, pglease.ErrNotAcquired) {
		return nil
	}
	if err != nil {
		return err
	}
	defer j.release(ctx, lease)
	return j.sweep(ctx, lease)
}
