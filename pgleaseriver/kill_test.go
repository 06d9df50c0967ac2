//go:build unix

package pgleaseriver

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	pgtest.ExportDatabaseURL = true // for the example
	pgtest.Main(m)
}

// The worker processes of TestSIGKILLedWorkerBreaksNoLimit are this test
// binary, started with these variables.
const (
	workerEnv = "PGLEASERIVER_TEST_WORKER" // the worker's owner
	schemaEnv = "PGLEASERIVER_TEST_SCHEMA" // River's schema and the lease table's
	logEnv    = "PGLEASERIVER_TEST_LOG"    // the file each job appends to
	dsnEnv    = "PGLEASERIVER_TEST_DSN"
)

// The jobs of the test: "exclusive" runs one at a time, "pair" two at a
// time, "keyed" one at a time per key.
type exclusiveArgs struct{ N int }

func (exclusiveArgs) Kind() string { return "exclusive" }

type pairArgs struct{ N int }

func (pairArgs) Kind() string { return "pair" }

type keyedArgs struct {
	N   int
	Key string `json:"key"`
}

func (keyedArgs) Kind() string { return "keyed" }

// jobTime is how long each job works.
const jobTime = 300 * time.Millisecond

// testLimits are the limits of every worker.
func testLimits() []Limit {
	ff := []pglease.Option{pglease.WithTTL(2 * time.Second), pglease.WithFastFailover()}
	return []Limit{
		{Kind: "exclusive", Snooze: 100 * time.Millisecond, LeaseOptions: ff},
		{Kind: "pair", Slots: 2, Snooze: 100 * time.Millisecond, LeaseOptions: ff},
		{Kind: "keyed", Key: ArgsKey("key"), Snooze: 100 * time.Millisecond, LeaseOptions: ff},
	}
}

// workers registers the test's workers: each appends "start KIND KEY
// OWNER TOKEN UNIXNANO" to the log, works jobTime, then appends "end …"
// with the same fields.
func workers(owner string, log *os.File) *river.Workers {
	ws := river.NewWorkers()
	record := func(ctx context.Context, kind, key string) error {
		l, ok := LeaseOf(ctx)
		if !ok {
			return fmt.Errorf("job %s without a lease", kind)
		}
		// One write(2) of a short line to an O_APPEND file: lines of
		// several processes never interleave.
		fmt.Fprintf(log, "start %s %s %s %d %d\n", kind, key, owner, l.Token(), time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(jobTime):
		}
		fmt.Fprintf(log, "end %s %s %s %d %d\n", kind, key, owner, l.Token(), time.Now().UnixNano())
		return nil
	}
	river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, j *river.Job[exclusiveArgs]) error { return record(ctx, "exclusive", "-") }))
	river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, j *river.Job[pairArgs]) error { return record(ctx, "pair", "-") }))
	river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, j *river.Job[keyedArgs]) error {
		return record(ctx, "keyed", j.Args.Key)
	}))
	return ws
}

// riverConfig is the River configuration of the test's clients.
func riverConfig(schema string, ws *river.Workers, mw *Middleware) *river.Config {
	cfg := &river.Config{
		Schema:               schema,
		Workers:              ws,
		FetchPollInterval:    50 * time.Millisecond,
		FetchCooldown:        10 * time.Millisecond,
		JobTimeout:           5 * time.Second,
		RescueStuckJobsAfter: 5 * time.Second, // a killed worker's job is worked again after that
	}
	if mw != nil {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}}
		cfg.Middleware = []rivertype.Middleware{mw}
	}
	return cfg
}

// workerMain is one worker process: a River client with the middleware.
func workerMain() int {
	owner := os.Getenv(workerEnv)
	schema := os.Getenv(schemaEnv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(dsnEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	leases, err := pglease.NewFromPool(pool, pglease.Config{Table: schema + ".leases", Owner: owner})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer leases.Close()
	mw, err := New(leases, testLimits()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	log, err := os.OpenFile(os.Getenv(logEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	client, err := river.NewClient(riverpgxv5.New(pool), riverConfig(schema, workers(owner, log), mw))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := client.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = client.Stop(sctx)
	return 0
}

// interval is one run of a job, from the log.
type interval struct {
	kind, key, owner string
	token            int64
	start, end       time.Time // end is zero for a run cut short by the kill
}

// Three worker processes, each a River client (migrated by rivermigrate)
// with the middleware, work 40 jobs: 10 "exclusive" (one at a time), 14
// "pair" (two at a time) and 16 "keyed" (one at a time per key, two keys).
// The worker running an exclusive job is SIGKILLed mid-job. Every job
// completes; no limit is ever exceeded, counting the killed job as running
// until the kill; the exclusive jobs' tokens grow with their starts.
func TestSIGKILLedWorkerBreaksNoLimit(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	// The lease table lives in the same schema; the workers create it.
	inserter, err := river.NewClient(riverpgxv5.New(pool), riverConfig(schema, workers("inserter", nil), nil))
	if err != nil {
		t.Fatal(err)
	}
	var params []river.InsertManyParams
	for i := range 10 {
		params = append(params, river.InsertManyParams{Args: exclusiveArgs{N: i}})
	}
	for i := range 14 {
		params = append(params, river.InsertManyParams{Args: pairArgs{N: i}})
	}
	for i := range 16 {
		params = append(params, river.InsertManyParams{Args: keyedArgs{N: i, Key: []string{"x", "y"}[i%2]}})
	}
	if _, err := inserter.InsertMany(ctx, params); err != nil {
		t.Fatal(err)
	}

	logPath := filepath.Join(t.TempDir(), "jobs.log")
	procs := map[string]*exec.Cmd{}
	for i := range 3 {
		owner := fmt.Sprintf("worker-%d", i)
		procs[owner] = pgtest.Child(t, workerEnv+"="+owner, schemaEnv+"="+schema, logEnv+"="+logPath, dsnEnv+"="+pgtest.DSN(t))
	}

	readLog := func() []interval {
		b, err := os.ReadFile(logPath)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var runs []interval
		open := map[string]int{} // by owner and token: the run's index
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			var what string
			var r interval
			var ns int64
			if _, err := fmt.Sscan(sc.Text(), &what, &r.kind, &r.key, &r.owner, &r.token, &ns); err != nil {
				continue
			}
			id := fmt.Sprintf("%s %s %s %d", r.kind, r.key, r.owner, r.token)
			if what == "start" {
				r.start = time.Unix(0, ns)
				open[id] = len(runs)
				runs = append(runs, r)
			} else if i, ok := open[id]; ok {
				runs[i].end = time.Unix(0, ns)
			}
		}
		return runs
	}

	// The victim: a worker in the middle of an exclusive job.
	var victim string
	pgtest.WaitFor(t, 2*pgtest.Patience, "a worker in the middle of an exclusive job", func() bool {
		for _, r := range readLog() {
			if r.kind == "exclusive" && r.end.IsZero() && time.Since(r.start) < jobTime/2 {
				victim = r.owner
				return true
			}
		}
		return false
	})
	killed := time.Now()
	if err := procs[victim].Process.Kill(); err != nil {
		t.Fatal(err)
	}

	// Every job completes (the killed one once River rescues it).
	pgtest.WaitFor(t, 3*pgtest.Patience, "every job completed", func() bool {
		var left int
		pgtest.QueryRow(t, fmt.Sprintf(`SELECT count(*) FROM %q.river_job WHERE state <> 'completed'`, schema), nil, &left)
		return left == 0
	})
	runs := readLog()
	for i := range runs {
		if runs[i].end.IsZero() {
			if runs[i].owner != victim {
				t.Errorf("a run by %s never ended: %+v", runs[i].owner, runs[i])
			}
			runs[i].end = killed // cut short by the kill
		}
	}

	// No limit exceeded: at no start are more runs of the limit going on
	// than it allows.
	exceeded := 0
	limitOf := map[string]int{"exclusive": 1, "pair": 2, "keyed": 1}
	for _, r := range runs {
		running := 0
		for _, o := range runs {
			if o.kind == r.kind && o.key == r.key && !o.start.After(r.start) && o.end.After(r.start) {
				running++
			}
		}
		if running > limitOf[r.kind] {
			exceeded++
			t.Errorf("%s %s started by %s at %s with %d running", r.kind, r.key, r.owner, r.start.Format("15:04:05.000"), running)
		}
	}
	// The exclusive runs' tokens grow with their starts.
	var excl []interval
	for _, r := range runs {
		if r.kind == "exclusive" {
			excl = append(excl, r)
		}
	}
	sort.Slice(excl, func(i, j int) bool { return excl[i].start.Before(excl[j].start) })
	for i := 1; i < len(excl); i++ {
		if excl[i].token <= excl[i-1].token {
			t.Errorf("exclusive token %d started after token %d", excl[i].token, excl[i-1].token)
		}
	}
	takeover := time.Duration(-1)
	for _, r := range excl {
		if r.start.After(killed) {
			takeover = r.start.Sub(killed)
			break
		}
	}
	t.Logf("River, 3 worker processes, 40 jobs under 3 limits, %s SIGKILLed mid-job: %d runs (%d of them exclusive), %d over a limit, every job completed; next exclusive job %v after the kill",
		victim, len(runs), len(excl), exceeded, takeover.Round(time.Millisecond))
}
