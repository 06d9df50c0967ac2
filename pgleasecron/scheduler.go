package pgleasecron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// Config configures a [Scheduler].
type Config struct {
	// Config is the configuration of the scheduler's lease client: the
	// lease table (the jobs and runs tables are named after it), the
	// replica's Owner (recorded in each run), the job leases' TTL, the
	// Logger.
	pglease.Config
	// History is how many runs of each job the runs table keeps. Default
	// 100.
	History int
	// Tolerance is how late a tick may be claimed and still be on time;
	// a later one is a missed tick (see [MissedPolicy]). Default 1 minute.
	Tolerance time.Duration
	// Clock is the replica's clock. Only durations are taken from it: a
	// tick is due by the server's clock, which the scheduler estimates
	// from its replies. Tests skew it; default time.Now.
	Clock func() time.Time
}

const (
	defaultHistory   = 100
	defaultTolerance = time.Minute
	maxJobName       = 200
	leasePrefix      = "cron:"
	opTimeout        = 10 * time.Second
)

// A Scheduler runs jobs on one replica. Every replica creates one with the
// same jobs and calls Run; each tick of a job then runs on one of them.
type Scheduler struct {
	cfg    Config
	pool   *pgxpool.Pool
	client *pglease.Client
	q      queries
	log    *slog.Logger

	mu      sync.Mutex
	jobs    []*job
	byName  map[string]*job
	started bool
	ready   bool // prepared, for the jobs of Wrap (robfig.go)

	// wrapped is the lifetime of the runs of Wrap's jobs, which robfig's
	// Cron starts: Close ends it.
	wrapped context.Context
	stop    context.CancelFunc

	clock serverClock

	// beforeClaim, set by tests before Run, is called before each claim
	// of a tick.
	beforeClaim func(tick time.Time, status Status, token int64)
}

// New returns a scheduler whose jobs' leases and state live in the lease
// table cfg names, on pool. It checks cfg without connecting.
func New(pool *pgxpool.Pool, cfg Config) (*Scheduler, error) {
	if pool == nil {
		return nil, invalid("New needs a pool")
	}
	if cfg.History == 0 {
		cfg.History = defaultHistory
	}
	if cfg.History < 1 {
		return nil, invalid("Config.History %d: keep at least 1 run per job", cfg.History)
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = defaultTolerance
	}
	if cfg.Tolerance < 0 {
		return nil, invalid("Config.Tolerance %v must not be negative", cfg.Tolerance)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	t, err := tablesOf(cfg.Table)
	if err != nil {
		return nil, err
	}
	client, err := pglease.NewFromPool(pool, cfg.Config)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	wrapped, stop := context.WithCancel(context.Background())
	return &Scheduler{
		cfg: cfg, pool: pool, client: client, q: build(t),
		log: log, byName: map[string]*job{}, clock: serverClock{local: cfg.Clock},
		wrapped: wrapped, stop: stop,
	}, nil
}

// Add registers a job: its name (1–200 bytes of UTF-8, unique in the lease
// table; every replica must give it the same schedule), its schedule (see
// [Parse]) and its function. fn runs once per tick on one replica, with a
// context that ends when the job's lease is lost or Run's context ends;
// [TickOf] tells it which tick it runs. A returned error (or a panic) is
// recorded as the run's outcome. Add must be called before Run.
func (s *Scheduler) Add(name, schedule string, fn func(context.Context) error, opts ...Option) error {
	o := jobOptions{missed: RunOnce, overlap: SkipOverlap, abandoned: Leave}
	for _, opt := range opts {
		opt(&o)
	}
	sched, err := Parse(schedule, o.loc)
	if err != nil {
		return forJob(name, err)
	}
	_, err = s.add(name, sched, fn, o)
	return err
}

// AddSchedule is Add with a Schedule of the caller's own (its String is
// recorded in the jobs table).
func (s *Scheduler) AddSchedule(name string, sched Schedule, fn func(context.Context) error, opts ...Option) error {
	o := jobOptions{missed: RunOnce, overlap: SkipOverlap, abandoned: Leave}
	for _, opt := range opts {
		opt(&o)
	}
	if sched == nil {
		return &InvalidError{Job: name, Reason: "nil schedule: pass a Schedule (see Parse and Every)"}
	}
	_, err := s.add(name, sched, fn, o)
	return err
}

func (s *Scheduler) add(name string, sched Schedule, fn func(context.Context) error, o jobOptions) (*job, error) {
	if err := CheckJobName(name); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, &InvalidError{Job: name, Reason: "nil function: pass the function the job runs"}
	}
	if err := o.check(); err != nil {
		return nil, forJob(name, err)
	}
	rows, sc, err := checkLease(s.cfg.Config, leasePrefix+name, o.lease)
	if err != nil {
		return nil, forJob(name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil, fmt.Errorf("pgleasecron: job %q: Add after Run: register every job before Run", name)
	}
	if _, dup := s.byName[name]; dup {
		return nil, &InvalidError{Job: name, Reason: "registered twice: give each job a name of its own"}
	}
	j := &job{s: s, name: name, lease: leasePrefix + name, rows: rows, sched: sched, fn: fn, o: o,
		check: checkEvery(sc.TTL)}
	s.jobs = append(s.jobs, j)
	s.byName[name] = j
	return j, nil
}

// CheckJobName reports whether name is a valid job name: 1–200 bytes of
// UTF-8 that make a valid lease name once prefixed with "cron:". The error
// is an *[InvalidError].
func CheckJobName(name string) error {
	if name == "" || len(name) > maxJobName {
		return invalid("invalid job name %q: it must be 1 to %d bytes of UTF-8, such as nightly-report", name, maxJobName)
	}
	if _, err := (pglease.Config{}).Plan(leasePrefix + name); err != nil {
		return refused(fmt.Sprintf("invalid job name %q", name), err)
	}
	return nil
}

// Run runs the registered jobs until ctx ends, then waits for the runs
// going on to return (their contexts are cancelled) and releases their
// leases. It creates the jobs and runs tables when missing (and the lease
// table, unless Config.DisableAutoMigrate is set). Database errors while
// running are logged and retried; Run returns nil once ctx ends, or the
// error that kept it from starting.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("pgleasecron: Run called twice")
	}
	s.started = true
	var jobs []*job
	for _, j := range s.jobs {
		if !j.wrapped {
			jobs = append(jobs, j)
		}
	}
	s.mu.Unlock()
	if len(jobs) == 0 {
		return errors.New("pgleasecron: no jobs: call Add before Run (the jobs of Wrap run from robfig's Cron, without Run)")
	}
	if err := s.prepare(ctx); err != nil {
		return err
	}
	// Every job is registered before any runs: a database that refuses
	// the scheduler's statements (a privilege the role lacks) ends Run at
	// once with the reason, rather than a replica that looks healthy
	// while it retries for ever and runs nothing.
	lasts := make([]time.Time, len(jobs))
	for i, j := range jobs {
		last, err := j.registerFirst(ctx)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		lasts[i] = last
	}
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { j.loop(ctx, lasts[i]) })
	}
	wg.Wait()
	return nil
}

// Owner is the replica's Owner, recorded in the runs it claims.
func (s *Scheduler) Owner() string { return s.client.Owner() }

// Close closes the scheduler's lease client (not the pool). Call it after
// Run has returned, and after robfig's Cron has stopped for the jobs of
// Wrap (the runs still going have their contexts cancelled).
func (s *Scheduler) Close() error {
	s.stop()
	return s.client.Close()
}

// prepare is what Run does first: Migrate, or with
// Config.DisableAutoMigrate only a check that the tables exist.
func (s *Scheduler) prepare(ctx context.Context) error {
	if !s.cfg.DisableAutoMigrate {
		return s.Migrate(ctx)
	}
	exists, err := tablesExist(ctx, s.pool, s.q)
	if err == nil && !exists {
		err = fmt.Errorf("pgleasecron: the tables %s and %s do not exist and Config.DisableAutoMigrate is set: create them with the statements of pgleasecron.DDL", s.q.jobs, s.q.runs)
	}
	return err
}

// Migrate creates the lease table and the jobs and runs tables when
// missing (Run does it first, unless Config.DisableAutoMigrate is set).
func (s *Scheduler) Migrate(ctx context.Context) error {
	if err := admin.Migrate(ctx, s.client); err != nil {
		return err
	}
	exists, err := tablesExist(ctx, s.pool, s.q)
	if err != nil || exists {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The lock the lease table's creation takes, of the schema as the
		// server resolves it: one schema's tables are created one after
		// the other, however each replica spells the table.
		var nsp *string
		if err := tx.QueryRow(ctx, s.q.LockSchema, s.q.schema).Scan(&nsp); err != nil {
			return err
		}
		if nsp == nil {
			return errors.New("the lease table names no schema, and none of the search_path's schemas exists to create them in: create one, set search_path to an existing schema, or name the schema in Config.Table (SCHEMA.TABLE)")
		}
		for _, stmt := range []string{s.q.CreateJobs, s.q.CreateRuns} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if lacksPrivilege(err) {
		return fmt.Errorf("pgleasecron: create the tables %s and %s: %w (have a role that may create tables in their schema create them, with the statements of pgleasecron.DDL (the CLI's 'pglease schema'), then grant this role SELECT, INSERT, UPDATE and DELETE on them; see pglease's docs/OPERATIONS.md)", s.q.jobs, s.q.runs, err)
	}
	if err != nil {
		return fmt.Errorf("pgleasecron: create the tables %s and %s: %w", s.q.jobs, s.q.runs, err)
	}
	return nil
}

func tablesExist(ctx context.Context, pool *pgxpool.Pool, q queries) (bool, error) {
	var ok bool
	if err := pool.QueryRow(ctx, q.JobTablesExist, q.jobs, q.runs).Scan(&ok); err != nil {
		return false, fmt.Errorf("pgleasecron: look for the jobs tables: %w", err)
	}
	return ok, nil
}

// serverClock estimates the server's clock from the local one and the
// server's replies.
type serverClock struct {
	local  func() time.Time
	mu     sync.Mutex
	offset time.Duration // server minus local
}

// observe records a reply: the server read its clock (server) between the
// local readings before and after.
func (c *serverClock) observe(before, after, server time.Time) {
	mid := before.Add(after.Sub(before) / 2)
	c.mu.Lock()
	c.offset = server.Sub(mid)
	c.mu.Unlock()
}

// now is the server's time by the estimate.
func (c *serverClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.local().Add(c.offset)
}
