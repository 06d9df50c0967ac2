//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
)

// writeCrontab writes the lines of a pglease cron file into the test's
// temporary directory and returns its path.
func writeCrontab(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "crontab")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runRow is a row of a runs table.
type runRow struct {
	job                string
	tick               time.Time
	status, replica    string
	token              int64
	attempt            int
	missed             int64
	claimedAt          time.Time
	startedAt, endedAt *time.Time
	errText            *string
	claimedLate        time.Duration // claimed_at - tick
}

func (r runRow) String() string {
	e := ""
	if r.errText != nil {
		e = " error=" + strconv.Quote(*r.errText)
	}
	return fmt.Sprintf("%s %s %s replica=%s token=%d attempt=%d missed=%d claimed+%s%s",
		r.job, r.tick.UTC().Format(time.RFC3339Nano), r.status, r.replica, r.token, r.attempt, r.missed, r.claimedLate.Round(time.Millisecond), e)
}

// runsTable reads the runs table of a lease table for one test, on one
// connection of its own, closed when the test ends. The tests poll it
// every few milliseconds; a connection per read, kept until the test
// ended, took hundreds of the connections the parallel tests share.
type runsTable struct {
	t     *testing.T
	table string
	app   string // the connection's application_name (pgtest.Backends)
	conn  *pgx.Conn
}

func newRunsTable(t *testing.T, table string) *runsTable {
	t.Helper()
	app := pgtest.AppName("cli runs")
	return &runsTable{t: t, table: table, app: app, conn: pgtest.AppConn(t, app)}
}

// of reads the runs of job, oldest tick first.
func (rt *runsTable) of(job string) []runRow {
	t := rt.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := rt.conn.Query(ctx, `SELECT job, tick, status, replica, coalesce(token, 0), attempt, missed,
		claimed_at, started_at, ended_at, error FROM `+rt.table+`_runs WHERE job = $1 ORDER BY tick`, job)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		if err := rows.Scan(&r.job, &r.tick, &r.status, &r.replica, &r.token, &r.attempt, &r.missed,
			&r.claimedAt, &r.startedAt, &r.endedAt, &r.errText); err != nil {
			t.Fatal(err)
		}
		r.claimedLate = r.claimedAt.Sub(r.tick)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// tickLines reads the lines "TICK OWNER" the test commands append.
func tickLines(t *testing.T, path string) (ticks []time.Time, owners []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue // the last line, or one being written
		}
		tick, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatalf("%s: PGLEASE_TICK %q is not RFC 3339: %v", path, f[0], err)
		}
		ticks, owners = append(ticks, tick), append(owners, f[1])
	}
	return ticks, owners
}

// Three replicas run one file with a job every second for about 30 ticks;
// one of them is SIGKILLed half-way. Every tick in the window runs once:
// none twice, none lost. The job queues a tick that comes while a run
// goes on and runs the missed ones, so that a loaded machine that wakes
// the replicas late does not turn a late tick into a skipped one: what is
// counted is the scheduler's claim, not its punctuality (how late the
// ticks were claimed is logged).
func TestCronRunsEveryTickOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	history := newRunsTable(t, table)
	out := filepath.Join(t.TempDir(), "ticks")
	crontab := writeCrontab(t,
		"# every replica runs this file",
		`tick @every 1s --missed=all:5 --overlap=queue -- echo "$PGLEASE_TICK $PGLEASE_OWNER" >> `+out)
	replicas := []string{"replica-a", "replica-b", "replica-c"}
	procs := map[string]*proc{}
	for _, r := range replicas {
		procs[r] = start(t, env, "cron", crontab, "--table", table, "--owner", r, "--fast-failover", "--ttl", "5s")
	}
	const total, killAfter = 30, 15
	var first time.Time
	waitFor(t, "the first tick", func() bool {
		ticks, _ := tickLines(t, out)
		if len(ticks) > 0 {
			first = ticks[0]
		}
		return len(ticks) > 0
	})

	// Half-way, SIGKILL the replica that ran the latest tick, just after
	// its run ended: between two ticks, when no replica holds the job's
	// lease, so that no tick dies with it (should the kill come late
	// nonetheless, a tick it abandoned is accounted for below).
	var victim string
	var killedAt time.Time
	waitFor(t, fmt.Sprintf("%d ticks and a finished run", killAfter), func() bool {
		ticks, _ := tickLines(t, out)
		if len(ticks) < killAfter {
			return false
		}
		runs := history.of("tick")
		last := runs[len(runs)-1]
		if last.status != "succeeded" {
			return false
		}
		victim, killedAt = last.replica, time.Now()
		procs[victim].signal(syscall.SIGKILL)
		return true
	})
	procs[victim].wait()

	waitFor(t, fmt.Sprintf("%d ticks", total), func() bool {
		ticks, _ := tickLines(t, out)
		return len(ticks) > 0 && !ticks[len(ticks)-1].Before(first.Add(total*time.Second))
	})
	for _, r := range replicas {
		if r != victim {
			procs[r].signal(syscall.SIGTERM)
		}
	}
	for _, r := range replicas {
		if r == victim {
			continue
		}
		if code := procs[r].wait(); code != 0 {
			t.Errorf("%s: exit %d after SIGTERM, want 0\n%s", r, code, procs[r].stderr)
		}
	}

	ticks, owners := tickLines(t, out)
	last := ticks[len(ticks)-1]
	runs := history.of("tick")
	byTick := map[time.Time]runRow{}
	for _, r := range runs {
		byTick[r.tick.UTC()] = r
	}
	count := map[time.Time]int{}
	perReplica := map[string]int{}
	for i, tk := range ticks {
		count[tk.UTC()]++
		perReplica[owners[i]]++
	}
	var expected, ran, doubled, lost, abandoned int
	var problems []string
	for tk := first; !tk.After(last); tk = tk.Add(time.Second) {
		expected++
		n := count[tk.UTC()]
		r, recorded := byTick[tk.UTC()]
		switch {
		case n == 1:
			ran++
		case n > 1:
			ran++
			doubled += n - 1
			problems = append(problems, fmt.Sprintf("tick %s ran %d times", tk.Format(time.RFC3339), n))
		case recorded && r.status == "abandoned" && r.replica == victim:
			// The kill came while the victim ran it: at most once, as
			// --abandoned=leave promises; not a loss of the scheduler's.
			abandoned++
		default:
			lost++
			problems = append(problems, fmt.Sprintf("tick %s did not run", tk.Format(time.RFC3339)))
		}
	}
	var late time.Duration
	var missedRows int
	for _, r := range runs {
		late = max(late, r.claimedLate)
		if r.missed > 0 {
			missedRows++
		}
		// A run still going when the test stops the replicas gets their
		// SIGTERM (pglease cron passes it on, as documented): it may end
		// failed, after its command wrote its line.
		stopped := r.status == "failed" && r.errText != nil && strings.HasSuffix(*r.errText, "(pglease cron was stopping)")
		if !r.tick.Before(first) && !r.tick.After(last) && r.status != "succeeded" && r.status != "abandoned" && !stopped {
			problems = append(problems, "run "+r.String())
		}
	}
	t.Logf("3 replicas, @every 1s, %s SIGKILLed %s after the first tick: expected %d, run %d, doubled %d, lost %d (abandoned with the killed replica: %d); runs per replica %v; latest claim %s after its tick; runs standing for missed ticks: %d",
		victim, killedAt.Sub(first).Round(time.Second), expected, ran, doubled, lost, abandoned, perReplica, late.Round(time.Millisecond), missedRows)
	if expected < total || doubled > 0 || lost > 0 || len(problems) > 0 {
		var rows []string
		for _, r := range runs {
			rows = append(rows, r.String())
		}
		t.Errorf("problems: %s\nruns table:\n%s", strings.Join(problems, "; "), strings.Join(rows, "\n"))
	}
}

// settledJobs runs pglease with args (a pglease jobs command) until its
// output shows no run in progress: pglease cron goes on running its jobs
// every second meanwhile, and a tick running at that moment would be a
// job's last run.
func settledJobs(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	waitFor(t, "pglease "+strings.Join(args, " ")+" without a run in progress", func() bool {
		code, stdout, stderr = run(t, env, args...)
		return code != 0 || !strings.Contains(stdout, "running")
	})
	return code, stdout, stderr
}

// A job's command sees the PGLEASE_ variables of its tick; a command's
// exit status is its run's outcome: 0 succeeded, else failed with "exit
// status N" or "killed by signal N (SIGNAME)". pglease jobs lists them,
// with --json too, and JOB's history.
func TestCronCommandEnvironmentOutcomesAndJobs(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	history := newRunsTable(t, table)
	dir := t.TempDir()
	vars := filepath.Join(dir, "vars")
	crontab := writeCrontab(t,
		`vars @every 1s -- echo "$PGLEASE_JOB|$PGLEASE_TICK|$PGLEASE_NAME|$PGLEASE_TOKEN|$PGLEASE_OWNER|$PGLEASE_ATTEMPT|$PGLEASE_SLOT" >> `+vars,
		"fails @every 1s -- echo failing; exit 3",
		"killed @every 1s -- kill -9 $$",
	)
	p := start(t, append(env, "PGLEASE_SLOT=stale", "PGLEASE_TICK=stale"), "cron", crontab, "--table", table, "--owner", "host-1")
	waitFor(t, "a run of each job", func() bool {
		b, _ := os.ReadFile(vars)
		return len(b) > 0 && len(history.of("fails")) > 0 && len(history.of("killed")) > 0 &&
			history.of("fails")[0].status != "running" && history.of("killed")[0].status != "running"
	})
	// The poll read on one connection, however often it read.
	if n := pgtest.Backends(t, history.app); n != 1 {
		t.Errorf("%d sessions named %q after polling the runs table, want 1", n, history.app)
	}

	if !pgtest.Value[bool](t, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pglease cron host-1')") {
		t.Error("no connection named 'pglease cron host-1' in pg_stat_activity")
	}
	b, _ := os.ReadFile(vars)
	line := strings.SplitN(string(b), "\n", 2)[0]
	f := strings.Split(line, "|")
	if len(f) != 7 {
		t.Fatalf("the command saw %q", line)
	}
	tick, err := time.Parse(time.RFC3339Nano, f[1])
	if err != nil || tick.Location() != time.UTC || tick.Nanosecond() != 0 {
		t.Errorf("PGLEASE_TICK %q: want an instant in RFC 3339, UTC, on a whole second (%v)", f[1], err)
	}
	token, err := strconv.ParseInt(f[3], 10, 64)
	if f[0] != "vars" || f[2] != "cron:vars" || err != nil || token <= 0 || f[4] != "host-1" || f[5] != "1" || f[6] != "" {
		t.Errorf("the command saw JOB|TICK|NAME|TOKEN|OWNER|ATTEMPT|SLOT = %q; want vars|…|cron:vars|a token|host-1|1| (no stale PGLEASE_SLOT)", line)
	}
	// The command wrote its line before it exited: its run is recorded as
	// ended a moment later.
	var row runRow
	waitFor(t, "the run of tick "+f[1]+" to end", func() bool {
		for _, r := range history.of("vars") {
			if r.tick.Equal(tick) {
				row = r
			}
		}
		return row.status != "" && row.status != "running"
	})
	if row.status != "succeeded" || row.token != token || row.replica != "host-1" {
		t.Errorf("the run of tick %s: %v; want succeeded, token %d, replica host-1", f[1], row, token)
	}
	for job, want := range map[string]string{"fails": "exit status 3", "killed": "killed by signal 9 (SIGKILL)"} {
		r := history.of(job)[0]
		if r.status != "failed" || r.errText == nil || *r.errText != want {
			t.Errorf("job %s: %v, want failed with %q", job, r, want)
		}
	}

	code, stdout, stderr := settledJobs(t, env, "jobs", "--table", table)
	if code != 0 {
		t.Fatalf("jobs: exit %d: %s", code, stderr)
	}

	for _, want := range []string{"JOB", "NEXT TICK", "fails", "failed: exit status 3", "killed by signal 9 (SIGKILL)", "vars", "succeeded", "host-1", "@every 1s", "(in "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("jobs does not show %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = settledJobs(t, env, "jobs", "--json", "--table", table)
	var jobs []struct {
		Name     string     `json:"name"`
		Schedule string     `json:"schedule"`
		NextTick *time.Time `json:"next_tick"`
		LastRun  *struct {
			Tick     time.Time `json:"tick"`
			Status   string    `json:"status"`
			Error    string    `json:"error"`
			Replica  string    `json:"replica"`
			Token    int64     `json:"token"`
			Duration *float64  `json:"duration_seconds"`
		} `json:"last_run"`
	}
	if err := json.Unmarshal([]byte(stdout), &jobs); code != 0 || err != nil {
		t.Fatalf("jobs --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	var names []string
	for _, j := range jobs {
		names = append(names, j.Name)
		lr := j.LastRun
		if j.Schedule != "@every 1s" || j.NextTick == nil || lr == nil || lr.Replica != "host-1" || lr.Token <= 0 || lr.Tick.IsZero() {
			t.Errorf("jobs --json: %+v %+v", j, lr)
			continue
		}
		if j.Name == "fails" && (lr.Status != "failed" || lr.Error != "exit status 3") {
			t.Errorf("jobs --json: fails ended %q %q", lr.Status, lr.Error)
		}
	}
	if !slices.Equal(names, []string{"fails", "killed", "vars"}) {
		t.Errorf("jobs --json lists %v", names)
	}

	// A role that may only read the jobs and runs tables suffices.
	ro := pgtest.SelectOnlyDSN(t, table+"_jobs", table+"_runs")
	code, stdout, stderr = settledJobs(t, []string{"PGLEASE_DSN=" + ro}, "jobs", "--table", table)
	if code != 0 || !strings.Contains(stdout, "failed: exit status 3") {
		t.Errorf("jobs as a SELECT-only role: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	code, stdout, stderr = settledJobs(t, env, "jobs", "fails", "--limit", "1", "--table", table)
	if code != 0 || strings.Count(stdout, "\n") != 2 || !strings.Contains(stdout, "failed: exit status 3") {
		t.Errorf("jobs fails --limit 1: exit %d, want a header and one run:\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = run(t, env, "jobs", "nosuch", "--table", table)
	if code != 3 || stdout != "" || !strings.Contains(stderr, "no job named nosuch") {
		t.Errorf("jobs nosuch: exit %d, stdout %q, stderr %q; want 3 and no job named nosuch", code, stdout, stderr)
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0: %s", code, p.stderr)
	}
	// One line per run on stderr, and the command's own output on stdout.
	if !strings.Contains(p.stderr.String(), "pglease: job fails, tick ") || !strings.Contains(p.stderr.String(), ": failed: exit status 3 (token ") ||
		!strings.Contains(p.stdout.String(), "failing\n") {
		t.Errorf("stdout %q\nstderr %q", p.stdout, p.stderr)
	}
}
