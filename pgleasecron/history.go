package pgleasecron

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Status is the state of a tick in the history.
type Status string

// The statuses of a run.
const (
	StatusRunning   Status = "running"   // its runner holds the job's lease
	StatusSucceeded Status = "succeeded" // the function returned nil
	StatusFailed    Status = "failed"    // it returned an error or panicked
	StatusLost      Status = "lost"      // the job's lease ended while it ran (Retry runs it again)
	StatusAbandoned Status = "abandoned" // its runner died before it ended
	StatusSkipped   Status = "skipped"   // the run before was still going
	StatusMissed    Status = "missed"    // no replica ran it in time (Skip)
)

// Run is one tick in a job's history.
type Run struct {
	Job     string
	Tick    time.Time // the scheduled instant
	Status  Status
	Replica string // the Owner of the replica that claimed (or last ran) it
	Token   int64  // the fencing token it ran under; 0 when it did not run
	Attempt int
	Missed  int64 // earlier ticks not run that this row stands for
	// ClaimedAt, StartedAt and EndedAt are the server's times; StartedAt
	// and EndedAt are zero when the tick did not start or has not ended.
	ClaimedAt, StartedAt, EndedAt time.Time
	Error                         string
}

// JobInfo is a job as the database knows it.
type JobInfo struct {
	Name     string
	Schedule string    // as registered
	LastTick time.Time // the last tick claimed (or the job's registration)
	SeenAt   time.Time // the last time a replica registered or claimed it
	// Next is the first tick after LastTick (in the past when it is due
	// and no replica has claimed it yet); zero when the schedule cannot be
	// read here or has no more instants.
	Next    time.Time
	LastRun *Run // nil before the first tick
}

// History returns the newest runs of job, newest first, at most limit.
func (s *Scheduler) History(ctx context.Context, job string, limit int) ([]Run, error) {
	return history(ctx, s.pool, s.q, job, limit)
}

// Jobs returns every job of the lease table, by name.
func (s *Scheduler) Jobs(ctx context.Context) ([]JobInfo, error) {
	return jobs(ctx, s.pool, s.q)
}

// ReadHistory is [Scheduler.History] without a scheduler: the runs of job
// in the lease table named table ("" for the default). It creates nothing:
// a table that does not exist has no runs.
func ReadHistory(ctx context.Context, pool *pgxpool.Pool, table, job string, limit int) ([]Run, error) {
	t, err := tablesOf(table)
	if err != nil {
		return nil, err
	}
	return history(ctx, pool, build(t), job, limit)
}

// ReadJobs is [Scheduler.Jobs] without a scheduler. It creates nothing: a
// table that does not exist has no jobs.
func ReadJobs(ctx context.Context, pool *pgxpool.Pool, table string) ([]JobInfo, error) {
	t, err := tablesOf(table)
	if err != nil {
		return nil, err
	}
	return jobs(ctx, pool, build(t))
}

func history(ctx context.Context, pool *pgxpool.Pool, q queries, job string, limit int) ([]Run, error) {
	if limit < 1 {
		return nil, invalid("history limit %d: ask for at least 1 run", limit)
	}
	if ok, err := tablesExist(ctx, pool, q); err != nil || !ok {
		return nil, err
	}
	what := fmt.Sprintf("read the runs of job %q in %s", job, q.runs)
	rows, err := pool.Query(ctx, q.Runs, job, limit)
	if err != nil {
		return nil, readError(what, q, err)
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Run, error) {
		var run Run
		var started, ended *time.Time
		err := r.Scan(&run.Job, &run.Tick, &run.Status, &run.Replica, &run.Token, &run.Attempt,
			&run.Missed, &run.ClaimedAt, &started, &ended, &run.Error)
		run.StartedAt, run.EndedAt = deref(started), deref(ended)
		return run, err
	})
	return runs, readError(what, q, err)
}

// readError is err, the error of a read of the jobs tables (what it read),
// with what to grant when the role lacks a privilege; nil stays nil.
func readError(what string, q queries, err error) error {
	if err == nil {
		return nil
	}
	hint := ""
	if lacksPrivilege(err) {
		hint = fmt.Sprintf(" (grant the role SELECT on %s and %s, and USAGE on their schema; see pglease's docs/OPERATIONS.md)", q.jobs, q.runs)
	}
	return fmt.Errorf("pgleasecron: %s: %w%s", what, err, hint)
}

func jobs(ctx context.Context, pool *pgxpool.Pool, q queries) ([]JobInfo, error) {
	if ok, err := tablesExist(ctx, pool, q); err != nil || !ok {
		return nil, err
	}
	what := fmt.Sprintf("read the jobs in %s and %s", q.jobs, q.runs)
	rows, err := pool.Query(ctx, q.Jobs)
	if err != nil {
		return nil, readError(what, q, err)
	}
	infos, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobInfo, error) {
		var j JobInfo
		var run Run
		var started, ended *time.Time
		var tick, claimed *time.Time
		err := r.Scan(&j.Name, &j.Schedule, &j.LastTick, &j.SeenAt, &tick, &run.Status, &run.Replica,
			&run.Token, &run.Attempt, &run.Missed, &claimed, &started, &ended, &run.Error)
		if err != nil {
			return j, err
		}
		if run.Status != "" {
			run.Job, run.Tick, run.ClaimedAt = j.Name, deref(tick), deref(claimed)
			run.StartedAt, run.EndedAt = deref(started), deref(ended)
			j.LastRun = &run
		}
		if sched, err := Parse(j.Schedule, nil); err == nil {
			j.Next = sched.Next(j.LastTick)
		}
		return j, nil
	})
	return infos, readError(what, q, err)
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// DDL returns the SQL that creates the jobs and runs tables of the lease
// table "[schema.]table" ("" for the default), for users' own migration
// tools (the lease table's is admin.DDL); it is idempotent.
func DDL(table string) (string, error) {
	t, err := tablesOf(table)
	if err != nil {
		return "", err
	}
	q := build(t)
	return q.CreateJobs + ";\n\n" + q.CreateRuns + ";\n", nil
}
