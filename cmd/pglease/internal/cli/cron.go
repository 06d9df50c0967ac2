package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
	_ "time/tzdata" // CRON_TZ zones also in images without a zone database

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/cmd/pglease/internal/human"
	"github.com/pglease/pglease/pgleasecron"
)

// pglease cron FILE runs the jobs of a crontab-like file (crontab.go) with
// package pgleasecron: each tick of a job runs its COMMAND on one of the
// replicas that run the same file. A tick's COMMAND runs as pglease run
// runs its COMMAND: under a supervisor, in a process group of its own,
// within the job's lease (guard, in run.go). The command's exit status is
// the run's outcome in the history.

var cronFlags = append([]flagSpec{
	{name: "ttl", kind: durationFlag, arg: "DURATION", usage: "TTL of the jobs' leases, at least 1s (default 30s)"},
	{name: "owner", kind: stringFlag, arg: "ID", usage: "this replica's name in the leases and the run history, e.g. a pod name (default hostname-pid-random)"},
	{name: "kill-grace", kind: durationFlag, arg: "DURATION", usage: "SIGTERM to SIGKILL grace when a job's lease is lost or pglease cron stops; must leave room for a renewal (default min(TTL/4, 10s))"},
	{name: "fast-failover", kind: boolFlag, usage: "tie the jobs' leases to the database session: when a replica dies holding a job's lease, the job's next tick runs elsewhere at once, not after the TTL"},
	{name: "missed", kind: stringFlag, arg: "POLICY", usage: "ticks that came while no replica ran the job: run-once (the latest, the default), skip or all:N (the latest N)"},
	{name: "overlap", kind: stringFlag, arg: "POLICY", usage: "a tick that comes while the job's previous run goes on: skip (the default) or queue"},
	{name: "abandoned", kind: stringFlag, arg: "POLICY", usage: "a tick whose replica died while running it, or whose run was lost with its lease: leave (at most once, the default) or retry:N (at least once, N runs at most)"},
	{name: "check", kind: boolFlag, usage: "check FILE and print its jobs with their next tick, without connecting"},
}, connFlags...)

type cronOptions struct {
	file  string
	jobs  []cronJob
	dsn   string
	table string
	owner string
	ttl   time.Duration
	grace time.Duration
	fast  bool
	check bool
}

// parseCron validates the flags and FILE before anything connects; every
// invalid line of FILE is reported. Usage errors, an unreadable FILE
// included, exit 2.
func (e *env) parseCron(args []string) (o cronOptions, code int, done bool) {
	fs, code, done := e.parse("cron", args)
	if done {
		return o, code, true
	}
	bad := func(err error) (cronOptions, int, bool) { return o, e.usage("cron", err), true }
	switch words := append(fs.args, fs.rest...); len(words) {
	case 0:
		return bad(usagef("missing FILE: pglease cron FILE, where each line of FILE is NAME SCHEDULE -- COMMAND"))
	case 1:
		o.file = words[0]
	default:
		return bad(usagef("expected one FILE, got %d arguments: %s", len(words), quoteArg(strings.Join(words, " "))))
	}
	o.ttl = fs.duration("ttl", 30*time.Second)
	// Every job's lease has the same timing, whatever its name.
	sched, err := (pglease.Config{}).Plan("cron", pglease.WithTTL(o.ttl))
	if err != nil {
		return bad(usagef("invalid --ttl %s: %s", fs.str("ttl"), reason(err)))
	}
	if o.grace, o.owner, err = graceAndOwner(fs, sched); err != nil {
		return bad(err)
	}
	o.fast = fs.boolean("fast-failover")
	o.check = fs.boolean("check")
	policies := defaultPolicies
	for _, p := range cronPolicyNames {
		if fs.isSet(p.name) {
			if err := policies.set(p.name, fs.str(p.name)); err != nil {
				return bad(usagef("%v", err))
			}
		}
	}
	o.table = fs.str("table")
	if err := checkTable(o.table); err != nil {
		return bad(err)
	}
	o.dsn = e.resolveDSN(fs.str("dsn"), fs.isSet("dsn"))
	if err := e.checkDSN(o.dsn); err != nil && !o.check {
		return bad(err)
	}
	text, err := readCrontab(o.file)
	if err != nil {
		return bad(usagef("%v", err))
	}
	jobs, errs := parseCrontab(o.file, text, policies)
	for _, err := range errs {
		fmt.Fprintf(e.stderr, "pglease: %s\n", e.redact(err.Error()))
	}
	switch {
	case len(errs) > 0:
		return bad(usagef("%s: %d invalid line(s); nothing was started", o.file, len(errs)))
	case len(jobs) == 0:
		return bad(usagef("%s has no jobs: add lines of the form NAME SCHEDULE -- COMMAND", o.file))
	}
	o.jobs = jobs
	return o, 0, false
}

// readCrontab reads FILE, refusing anything larger than a crontab.
func readCrontab(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("cannot read the crontab: %v: give the path of a readable file", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCrontab+1))
	if err != nil {
		return "", fmt.Errorf("cannot read the crontab %s: %v: give the path of a readable file", file, err)
	}
	if len(b) > maxCrontab {
		return "", fmt.Errorf("%s is larger than %d KiB: is it a crontab?", file, maxCrontab>>10)
	}
	return string(b), nil
}

// cronStops are the signals that stop pglease cron; they and the other
// forwarded signals are passed on to the running commands.
var cronStops = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func (e *env) cmdCron(ctx context.Context, args []string) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	o, code, done := e.parseCron(args)
	if done {
		return code
	}
	if o.check {
		e.printCronCheck(o)
		return exitOK
	}
	if !supported {
		return e.fail(errors.New("pglease cron is not supported on this platform: it needs Unix process groups"))
	}
	e.stdout = lockedWriter(e.stdout) // e.stderr and e.errOut are safe already (Main)
	stopJobControl := e.holdJobControl()
	defer stopJobControl()
	surviveBrokenPipe()
	if o.owner == "" {
		o.owner = defaultOwner()
	}
	// The pool's connections name the replica; the library's own
	// connection (renewals, notifications) is "pglease OWNER".
	pool, err := openPool(o.dsn, "pglease cron "+o.owner, int32(min(max(4, len(o.jobs)+1), 16)))
	if err != nil {
		return e.fail(err)
	}
	defer pool.Close()
	log := slog.New(newLineHandler(e))
	cfg := pglease.Config{Table: o.table, Owner: o.owner, TTL: o.ttl, Logger: log, Observer: &e.renewals}
	s, err := pgleasecron.New(pool, pgleasecron.Config{Config: cfg})
	if err != nil {
		return e.fail(err)
	}
	defer s.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &cron{e: e, o: o, cancel: cancel, subs: map[chan os.Signal]bool{}, stop: make(chan struct{}), kill: make(chan struct{})}
	for _, j := range o.jobs {
		opts := append(j.policies.options(), pgleasecron.InLocation(j.loc))
		if o.fast {
			opts = append(opts, pgleasecron.LeaseOptions(pglease.WithFastFailover()))
		}
		if err := s.Add(j.name, j.spec, c.tick(j), opts...); err != nil {
			return e.usage("cron", usagef("%s:%d: job %s: %s", o.file, j.line, quoteArg(j.name), cronReason(err)))
		}
	}
	finished := make(chan struct{})
	dispatched := make(chan struct{})
	go func() { defer close(dispatched); c.dispatch(ctx, sigs, finished) }()
	defer func() { close(finished); <-dispatched }()

	if err := ping(runCtx, pool); err != nil {
		if c.stopping() {
			return exitOK
		}
		return e.fail(err)
	}
	if err := e.cronTable(runCtx, pool, o); err != nil {
		if c.stopping() {
			return exitOK
		}
		return e.fail(err)
	}
	fmt.Fprintf(e.stderr, "pglease: cron: running %d job(s) of %s as %s\n", len(o.jobs), o.file, o.owner)
	err = s.Run(runCtx)
	if err != nil && !c.stopping() {
		return e.fail(err)
	}
	return exitOK
}

// cron is a running pglease cron.
type cron struct {
	e      *env
	o      cronOptions
	cancel context.CancelFunc // ends the scheduler's Run

	mu         sync.Mutex
	subs       map[chan os.Signal]bool // the running commands' signal channels
	stop, kill chan struct{}           // closed on the first and second stop signal
	stopped    bool                    // stop is closed
	killed     bool                    // kill is closed
}

// dispatch passes the signals on to the running commands until finished
// is closed; a stop signal (or the end of ctx) also stops the scheduler.
func (c *cron) dispatch(ctx context.Context, sigs <-chan os.Signal, finished <-chan struct{}) {
	done := ctx.Done()
	for {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-done:
			done, sig = nil, syscall.SIGTERM
		case <-finished:
			return
		}
		c.mu.Lock()
		for ch := range c.subs {
			select {
			case ch <- sig:
			default:
			}
		}
		running := len(c.subs)
		stop := slices.Contains(cronStops, sig)
		name := signalName(sig.(syscall.Signal))
		switch {
		case !stop:
			fmt.Fprintf(c.e.stderr, "pglease: cron: passed %s on to %d running command(s)\n", name, running)
		case !c.stopped:
			c.stopped = true
			close(c.stop)
			what := "stopping"
			if running > 0 {
				what = fmt.Sprintf("stopping once the %d running command(s), which got it too, have exited (SIGKILL after %s; %s again: at once)", running, c.o.grace, name)
			}
			fmt.Fprintf(c.e.stderr, "pglease: cron: got %s; %s\n", name, what)
		case !c.killed:
			c.killed = true
			close(c.kill)
			fmt.Fprintf(c.e.stderr, "pglease: cron: got %s again; killing %d running command(s)\n", name, running)
		}
		c.mu.Unlock()
		if stop {
			c.cancel()
		}
	}
}

// stopping reports whether a stop signal came.
func (c *cron) stopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// subscribe registers ch for the signals to come, unless pglease cron is
// stopping: then a command must not start.
func (c *cron) subscribe(ch chan os.Signal) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	c.subs[ch] = true
	return true
}

func (c *cron) unsubscribe(ch chan os.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, ch)
}

// tick is the job function of j: it runs j's command for the tick in ctx
// and returns the command's outcome.
func (c *cron) tick(j cronJob) func(context.Context) error {
	return func(ctx context.Context) error {
		t, ok := pgleasecron.TickOf(ctx)
		if !ok {
			return errors.New("pglease cron: a job function ran without its tick")
		}
		began := time.Now()
		err := c.runCommand(j, t)
		if err != nil && c.stopping() {
			err = fmt.Errorf("%w (pglease cron was stopping)", err)
		}
		c.report(j, t, err, time.Since(began))
		return err
	}
}

// runCommand runs j's command for tick t and returns its outcome.
func (c *cron) runCommand(j cronJob, t pgleasecron.Tick) error {
	sigs := make(chan os.Signal, 8)
	if !c.subscribe(sigs) {
		return errors.New("not started")
	}
	defer c.unsubscribe(sigs)
	lease := t.Lease
	vars := []string{"PGLEASE_NAME=" + lease.Name(), "PGLEASE_OWNER=" + c.o.owner,
		"PGLEASE_TOKEN=" + strconv.FormatInt(lease.Token(), 10), "PGLEASE_JOB=" + j.name,
		"PGLEASE_TICK=" + t.At.UTC().Format(time.RFC3339Nano), "PGLEASE_ATTEMPT=" + strconv.Itoa(t.Attempt)}
	session := c.e.sessionFile(lease, c.o.fast)
	sup, err := startSupervisor(child{path: "/bin/sh", argv: []string{"/bin/sh", "-c", j.command},
		env: childEnv(os.Environ(), vars), grace: c.o.grace, deadline: lease.Deadline(), session: session}, c.e)
	if session != nil {
		session.Close() // the supervisor has its copy
	}
	if err != nil {
		return err
	}
	renewed, unsubscribe := c.e.renewals.subscribe()
	defer unsubscribe()
	c.e.guard(guard{lease: lease, sup: sup, grace: c.o.grace, sigs: sigs, renewed: renewed, stop: c.stop, kill: c.kill})
	return commandOutcome(sup)
}

// commandOutcome is nil when the command exited 0, else what became of it.
func commandOutcome(sup *supervisor) error {
	switch {
	case sup.err != nil:
		return sup.err
	case sup.signal != 0:
		return fmt.Errorf("killed by signal %d (%s)", sup.signal, signalName(syscall.Signal(sup.signal)))
	case sup.code != 0:
		return fmt.Errorf("exit status %d", sup.code)
	}
	return nil
}

// report logs the end of a run on this replica, one line per run.
func (c *cron) report(j cronJob, t pgleasecron.Tick, err error, took time.Duration) {
	outcome := "succeeded"
	switch {
	case t.Lease.Context().Err() != nil:
		outcome = "lease lost: " + fmt.Sprint(err)
	case err != nil:
		outcome = "failed: " + err.Error()
	}
	attempt := ""
	if t.Attempt > 1 {
		attempt = fmt.Sprintf(", attempt %d", t.Attempt)
	}
	fmt.Fprintf(c.e.stderr, "pglease: job %s, tick %s: %s (token %d%s, %s)\n",
		quoteArg(j.name), t.At.UTC().Format(time.RFC3339Nano), c.e.redact(outcome), t.Lease.Token(), attempt, human.Duration(took))
}

// printCronCheck prints the jobs of a valid file (pglease cron --check).
func (e *env) printCronCheck(o cronOptions) {
	fmt.Fprintf(e.stdout, "%s: %d job(s)\n", o.file, len(o.jobs))
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LINE\tJOB\tSCHEDULE\tNEXT TICK (UTC)\tPOLICIES\tCOMMAND")
	now := time.Now()
	for _, j := range o.jobs {
		next := "never"
		if n := j.sched.Next(now); !n.IsZero() {
			next = n.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", j.line, display(j.name, 40), j.sched, next, j.policies, display(j.command, 60))
	}
	tw.Flush()
}

// openPool returns a pool for dsn (checked by checkDSN) whose connections
// carry appName as their application_name unless the DSN sets one. It does
// not connect.
func openPool(dsn, appName string, maxConns int32) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid connection string: %w", err)
	}
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		if len(appName) > 63 { // the server's limit
			appName = appName[:63]
		}
		pcfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pcfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(context.Background(), pcfg)
}

// ping makes the pool's first connection, within the connect timeout.
func ping(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, pool.Config().ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect: %w (is the server running and the DSN right?)", err)
	}
	return nil
}

// cronTable checks, before the scheduler starts, that the lease table a
// --table names exists (see prepareTable): the scheduler would create it.
func (e *env) cronTable(ctx context.Context, pool *pgxpool.Pool, o cronOptions) error {
	c, err := pglease.NewFromPool(pool, pglease.Config{Table: o.table, Owner: o.owner})
	if err != nil {
		return err
	}
	defer c.Close()
	return e.checkTableExists(ctx, c, o.table)
}

// defaultOwner is the library's default owner, hostname-pid-random, made
// here so that the pool's connections can name it.
func defaultOwner() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", hostname(), os.Getpid(), hex.EncodeToString(b[:]))
}

// lockedWriter makes w safe for concurrent use (the runs of pglease cron,
// pglease's messages beside a command's copied output); a file is left as
// it is, so that commands write to it directly.
func lockedWriter(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return &syncWriter{w: w}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// redactingWriter is stderr for the library's log, passwords removed.
type redactingWriter struct{ e *env }

func (r redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.e.stderr, r.e.redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
