package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/cmd/pglease/internal/human"
	"github.com/pglease/pglease/pgleasecron"
)

var jobsFlags = append([]flagSpec{
	jsonFlag,
	{name: "limit", kind: intFlag, arg: "N", usage: "with JOB: show its newest N runs, 1 to 1000 (default 20)"},
}, connFlags...)

// pglease jobs [JOB] lists the jobs of a table, or the run history of JOB.
// It only reads: missing tables have no jobs.
func (e *env) cmdJobs(ctx context.Context, args []string) int {
	fs, code, done := e.parse("jobs", args)
	if done {
		return code
	}
	words := append(fs.args, fs.rest...)
	if len(words) > 1 {
		return e.usage("jobs", usagef("expected at most one JOB, got %d arguments", len(words)))
	}
	var job string
	if len(words) == 1 {
		job = words[0]
		if err := pgleasecron.CheckJobName(job); err != nil {
			return e.usage("jobs", usagef("%s", cronReason(err)))
		}
	}
	limit := fs.integer("limit", 20)
	switch {
	case fs.isSet("limit") && job == "":
		return e.usage("jobs", usagef("--limit needs a JOB: pglease jobs JOB --limit N shows JOB's runs"))
	case limit < 1 || limit > 1000:
		return e.usage("jobs", usagef("invalid --limit %s: show 1 to 1000 runs", fs.str("limit")))
	}
	table := fs.str("table")
	if err := checkTable(table); err != nil {
		return e.usage("jobs", err)
	}
	dsn := e.resolveDSN(fs.str("dsn"), fs.isSet("dsn"))
	if err := e.checkDSN(dsn); err != nil {
		return e.usage("jobs", err)
	}
	e.noteDefaults()
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	pool, err := openPool(dsn, "pglease admin-"+hostname(), 2)
	if err != nil {
		return e.fail(err)
	}
	defer pool.Close()
	if err := ping(ctx, pool); err != nil {
		return e.fail(err)
	}
	if code, ok := e.jobsTable(ctx, pool, fs); !ok {
		return code
	}
	infos, err := pgleasecron.ReadJobs(ctx, pool, table)
	if err != nil {
		return e.fail(err)
	}
	// Durations and "next in" are reckoned on the server's clock, as every
	// time shown.
	now, err := serverNow(ctx, pool)
	if err != nil {
		return e.fail(err)
	}
	if job == "" {
		return e.listJobs(infos, now, fs.boolean("json"))
	}
	found := false
	for _, in := range infos {
		found = found || in.Name == job
	}
	if !found {
		fmt.Fprintf(e.stderr, "pglease: no job named %s in %s (pglease jobs lists them)\n", display(job, 200), tableName(table))
		return exitFree
	}
	runs, err := pgleasecron.ReadHistory(ctx, pool, table, job, limit)
	if err != nil {
		return e.fail(err)
	}
	return e.listRuns(runs, now, fs.boolean("json"))
}

// jobsTable checks, as ls does, that a lease table --table names exists:
// a typo is an error, not "no jobs".
func (e *env) jobsTable(ctx context.Context, pool *pgxpool.Pool, fs *flagSet) (int, bool) {
	if isDefaultTable(fs.str("table")) {
		return exitOK, true
	}
	c, err := pglease.NewFromPool(pool, pglease.Config{Table: fs.str("table"), Owner: "admin-" + hostname()})
	if err != nil {
		return e.fail(err), false
	}
	defer c.Close()
	_, code, ok := e.tableExists(ctx, c, fs, "there are no jobs to list")
	return code, ok
}

func serverNow(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	var now time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		return now, fmt.Errorf("read the server's clock: %w", err)
	}
	return now, nil
}

func (e *env) listJobs(infos []pgleasecron.JobInfo, now time.Time, asJSON bool) int {
	if asJSON {
		out := make([]jobJSON, len(infos))
		for i, in := range infos {
			out[i] = jobToJSON(in, now)
		}
		return e.printJSON(out)
	}
	if len(infos) == 0 {
		fmt.Fprintln(e.stdout, "no jobs")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSCHEDULE\tLAST TICK\tOUTCOME\tREPLICA\tDURATION\tNEXT TICK")
	for _, in := range infos {
		tick, outcome, replica, took := "-", "-", "-", "-"
		if r := in.LastRun; r != nil {
			tick, outcome, replica, took = utc(r.Tick), runOutcome(*r), display(r.Replica, 40), runDuration(*r, now)
		}
		next := "-"
		if !in.Next.IsZero() {
			if d := in.Next.Sub(now); d >= 0 {
				next = fmt.Sprintf("%s (in %s)", utc(in.Next), human.Duration(d))
			} else {
				next = fmt.Sprintf("%s (due %s ago)", utc(in.Next), human.Duration(-d))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", display(in.Name, 40), display(in.Schedule, 40), tick, outcome, replica, took, next)
	}
	tw.Flush()
	return exitOK
}

func (e *env) listRuns(runs []pgleasecron.Run, now time.Time, asJSON bool) int {
	if asJSON {
		out := make([]runJSON, len(runs))
		for i, r := range runs {
			out[i] = runToJSON(r, now)
		}
		return e.printJSON(out)
	}
	if len(runs) == 0 {
		fmt.Fprintln(e.stdout, "no runs")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TICK\tOUTCOME\tREPLICA\tTOKEN\tATTEMPT\tSTARTED\tDURATION")
	for _, r := range runs {
		started := "-"
		if !r.StartedAt.IsZero() {
			started = r.StartedAt.UTC().Format("2006-01-02T15:04:05.999Z07:00")
		}
		token := "-"
		if r.Token > 0 {
			token = fmt.Sprint(r.Token)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", utc(r.Tick), runOutcome(r), display(r.Replica, 40), token, r.Attempt, started, runDuration(r, now))
	}
	tw.Flush()
	return exitOK
}

// utc formats a time as RFC 3339 in UTC, as PGLEASE_TICK has it.
func utc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// runOutcome is a run's status with its error, shortened, and the missed
// ticks it stands for.
func runOutcome(r pgleasecron.Run) string {
	s := string(r.Status)
	if r.Error != "" {
		s += ": " + r.Error
	}
	s = display(s, 60)
	if r.Missed > 0 {
		s += fmt.Sprintf(" (+%d missed)", r.Missed)
	}
	return s
}

// runDuration is how long a run took, or has been running.
func runDuration(r pgleasecron.Run, now time.Time) string {
	switch {
	case r.StartedAt.IsZero():
		return "-"
	case r.EndedAt.IsZero():
		return "running " + human.Duration(now.Sub(r.StartedAt))
	}
	return human.Duration(r.EndedAt.Sub(r.StartedAt))
}

type jobJSON struct {
	Name      string     `json:"name"`
	Schedule  string     `json:"schedule"`
	LastTick  time.Time  `json:"last_tick"`
	SeenAt    time.Time  `json:"seen_at"`
	NextTick  *time.Time `json:"next_tick"`
	NextInSec *float64   `json:"next_in_seconds"`
	LastRun   *runJSON   `json:"last_run"`
}

type runJSON struct {
	Job         string     `json:"job"`
	Tick        time.Time  `json:"tick"`
	Status      string     `json:"status"`
	Error       string     `json:"error,omitempty"`
	Replica     string     `json:"replica"`
	Token       int64      `json:"token,omitempty"`
	Attempt     int        `json:"attempt"`
	Missed      int64      `json:"missed"`
	ClaimedAt   time.Time  `json:"claimed_at"`
	StartedAt   *time.Time `json:"started_at"`
	EndedAt     *time.Time `json:"ended_at"`
	DurationSec *float64   `json:"duration_seconds"`
}

func jobToJSON(in pgleasecron.JobInfo, now time.Time) jobJSON {
	j := jobJSON{Name: in.Name, Schedule: in.Schedule, LastTick: in.LastTick.UTC(), SeenAt: in.SeenAt.UTC()}
	if !in.Next.IsZero() {
		next, in := in.Next.UTC(), in.Next.Sub(now).Seconds()
		j.NextTick, j.NextInSec = &next, &in
	}
	if in.LastRun != nil {
		r := runToJSON(*in.LastRun, now)
		j.LastRun = &r
	}
	return j
}

func runToJSON(r pgleasecron.Run, now time.Time) runJSON {
	j := runJSON{Job: r.Job, Tick: r.Tick.UTC(), Status: string(r.Status), Error: r.Error, Replica: r.Replica,
		Token: r.Token, Attempt: r.Attempt, Missed: r.Missed, ClaimedAt: r.ClaimedAt.UTC()}
	if !r.StartedAt.IsZero() {
		started := r.StartedAt.UTC()
		j.StartedAt = &started
		end := now
		if !r.EndedAt.IsZero() {
			ended := r.EndedAt.UTC()
			j.EndedAt, end = &ended, ended
		}
		d := end.Sub(started).Seconds()
		j.DurationSec = &d
	}
	return j
}
