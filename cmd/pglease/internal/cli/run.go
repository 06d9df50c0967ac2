package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pglease/pglease"
)

var runFlags = append([]flagSpec{
	{name: "ttl", kind: durationFlag, arg: "DURATION", usage: "lease TTL, at least 1s (default 30s)"},
	{name: "wait", kind: boolFlag, usage: "wait until the lease is free instead of exiting 75"},
	{name: "timeout", kind: durationFlag, arg: "DURATION", usage: "with --wait: give up after this long (exit 75, or 125 if the database kept failing)"},
	{name: "owner", kind: stringFlag, arg: "ID", usage: "owner label, e.g. a pod name (default hostname-pid-random)"},
	{name: "kill-grace", kind: durationFlag, arg: "DURATION", usage: "SIGTERM to SIGKILL grace when the lease is lost; must leave room for a renewal before SIGTERM would be due (default min(TTL/4, 10s))"},
	{name: "fast-failover", kind: boolFlag, usage: "tie the lease to the database session: a waiter takes over within milliseconds when this process dies"},
	{name: "min-hold", kind: durationFlag, arg: "DURATION", usage: "keep the lease at least this long after acquiring, even if COMMAND ends sooner (at most the TTL)"},
	{name: "slots", kind: intFlag, arg: "N", usage: "let up to N holders run at once (a semaphore; every run of NAME must use the same N); COMMAND finds its slot, 0 to N-1, in $PGLEASE_SLOT"},
	{name: "shared", kind: boolFlag, usage: "a shared lease: run beside other --shared runs of NAME, never beside a run without it (which waits for them, and before which later --shared runs wait)"},
	{name: "quota", kind: intFlag, arg: "N", usage: "NAME is a quota of N units, of which this run takes --weight while it runs (every run of NAME must use the same N); first in line first: a later run waits behind an earlier one, whatever their weights"},
	{name: "weight", kind: intFlag, arg: "W", usage: "with --quota: the units this run takes, 1 to N (default 1)"},
	{name: "max-hold", kind: durationFlag, arg: "DURATION", usage: "end the command (SIGTERM, SIGKILL after --kill-grace) this long after acquiring, even if renewals succeed, release the lease and exit 76; longer than --kill-grace"},
	{name: "conflict-exit-code", kind: intFlag, arg: "N", usage: "exit status when the lease is held elsewhere, 0-255 (default 75; 0 suits Kubernetes CronJobs and cron mail)"},
}, connFlags...)

type runOptions struct {
	name     string
	command  []string
	path     string // command[0] looked up on PATH
	dsn      string
	table    string
	owner    string
	ttl      time.Duration
	wait     bool
	timeout  time.Duration
	grace    time.Duration
	fast     bool
	minHold  time.Duration
	maxHold  time.Duration // 0: no limit
	shared   bool
	slots    int // 0: a plain lease
	quota    int // 0: not a quota
	weight   int
	conflict int // exit status when the lease is held elsewhere
}

// leaseOptions are the library options of the run's lease.
func (o runOptions) leaseOptions() []pglease.Option {
	opts := []pglease.Option{pglease.WithTTL(o.ttl)}
	if o.fast {
		opts = append(opts, pglease.WithFastFailover())
	}
	if o.minHold > 0 {
		opts = append(opts, pglease.WithMinHold(o.minHold))
	}
	if o.slots > 0 {
		opts = append(opts, pglease.WithSlots(o.slots))
	}
	if o.shared {
		opts = append(opts, pglease.WithShared())
	}
	if o.quota > 0 {
		opts = append(opts, pglease.WithQuota(o.quota, o.weight))
	}
	// --max-hold is not the library's WithMaxHold, which frees the row at
	// the limit while the group may still be dying: the guard ends the
	// command first, then the lease is released (see hold).
	return opts
}

// parseRun validates everything about a run before anything connects. The
// values are checked by the library's own checks, so that the tool accepts
// exactly what the library accepts. Usage errors exit 125: a wrapper's own
// failure must never look like COMMAND's 1 or 2.
func (e *env) parseRun(args []string) (o runOptions, code int, done bool) {
	fs, code, done := e.parse("run", args)
	if done {
		if code == exitUsage {
			code = exitRunFailure
		}
		return o, code, true
	}
	bad := func(err error) (runOptions, int, bool) {
		e.usage("run", err)
		return o, exitRunFailure, true
	}
	if len(fs.args) != 1 {
		if len(fs.args) == 0 {
			return bad(usagef("missing lease NAME"))
		}
		return bad(usagef("expected one lease NAME before --, got %d: %s (put the command after --)", len(fs.args), quoteArg(strings.Join(fs.args, " "))))
	}
	o.name = fs.args[0]
	if err := checkName(o.name); err != nil {
		return bad(err)
	}
	if !fs.dashdash || len(fs.rest) == 0 {
		return bad(usagef("missing COMMAND: pglease run NAME [flags] -- COMMAND [ARG...]"))
	}
	o.command = fs.rest
	o.ttl = fs.duration("ttl", 30*time.Second)
	cfg := pglease.Config{TTL: o.ttl}
	sched, err := (pglease.Config{}).Plan(o.name, pglease.WithTTL(o.ttl)) // also refuses --ttl 0
	if err != nil {
		return bad(usagef("invalid --ttl %s: %s", fs.str("ttl"), reason(err)))
	}
	o.wait = fs.boolean("wait")
	if fs.isSet("timeout") {
		o.timeout = fs.duration("timeout", 0)
		if !o.wait {
			return bad(usagef("--timeout needs --wait"))
		}
		if o.timeout <= 0 {
			return bad(usagef("invalid --timeout %s: it must be positive", fs.str("timeout")))
		}
	}
	if o.grace, o.owner, err = graceAndOwner(fs, sched); err != nil {
		return bad(err)
	}
	o.fast = fs.boolean("fast-failover")
	if fs.isSet("min-hold") {
		o.minHold = fs.duration("min-hold", 0)
		if err := cfg.Validate(pglease.WithMinHold(o.minHold)); err != nil {
			hint := ""
			if o.minHold > o.ttl {
				hint = " (raise --ttl, or lower --min-hold)"
			}
			return bad(usagef("invalid --min-hold %s: %s%s", fs.str("min-hold"), reason(err), hint))
		}
	}
	if fs.isSet("max-hold") {
		o.maxHold = fs.duration("max-hold", 0)
		if err := cfg.Validate(pglease.WithMaxHold(o.maxHold), pglease.WithMinHold(o.minHold)); err != nil {
			return bad(usagef("invalid --max-hold %s: %s", fs.str("max-hold"), reason(err)))
		}
		if o.maxHold <= o.grace {
			return bad(usagef("invalid --max-hold %s: the command gets SIGTERM --kill-grace (%s) before it, so it must be longer than that", fs.str("max-hold"), o.grace))
		}
	}
	if fs.isSet("slots") {
		o.slots = fs.integer("slots", 0)
		if err := cfg.Validate(pglease.WithSlots(o.slots)); err != nil {
			return bad(usagef("invalid --slots %s: %s", fs.str("slots"), reason(err)))
		}
		if _, err := cfg.Plan(o.name, pglease.WithSlots(o.slots)); err != nil {
			return bad(usagef("invalid lease NAME %s for --slots %d: %s", quoteArg(o.name), o.slots, reason(err)))
		}
	}
	o.shared = fs.boolean("shared")
	if o.shared && o.slots > 0 {
		return bad(usagef("--shared and --slots do not combine: NAME is either a semaphore or shared and exclusive leases"))
	}
	if fs.isSet("weight") && !fs.isSet("quota") {
		return bad(usagef("--weight %s needs --quota N: the weight is the units this run takes of NAME's N", fs.str("weight")))
	}
	if fs.isSet("quota") {
		if o.shared || o.slots > 0 {
			return bad(usagef("--quota does not combine with --shared or --slots: NAME is one kind of lease"))
		}
		o.quota, o.weight = fs.integer("quota", 0), fs.integer("weight", 1)
		if _, err := cfg.Plan(o.name, pglease.WithQuota(o.quota, o.weight)); err != nil {
			return bad(usagef("invalid --quota %s --weight %d: %s", fs.str("quota"), o.weight, reason(err)))
		}
	}
	o.conflict = exitHeld
	if fs.isSet("conflict-exit-code") {
		o.conflict = fs.integer("conflict-exit-code", 0)
		if o.conflict < 0 || o.conflict > 255 {
			return bad(usagef("invalid --conflict-exit-code %s: an exit status is 0 to 255", fs.str("conflict-exit-code")))
		}
	}
	o.table = fs.str("table")
	if err := checkTable(o.table); err != nil {
		return bad(err)
	}
	o.dsn = e.resolveDSN(fs.str("dsn"), fs.isSet("dsn"))
	if err := e.checkDSN(o.dsn); err != nil {
		return bad(err)
	}
	path, err := exec.LookPath(o.command[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(e.stderr, "pglease: %s: command not found\n", quoteArg(o.command[0]))
			return o, exitNotFound, true
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err
		}
		fmt.Fprintf(e.stderr, "pglease: %s: cannot execute: %v\n", quoteArg(o.command[0]), err)
		return o, exitNoExec, true
	}
	o.path = path
	return o, 0, false
}

// graceAndOwner reads the --kill-grace and --owner flags of run and cron
// (the owner is "" when not given), for a lease with timing s.
func graceAndOwner(fs *flagSet, s pglease.Plan) (grace time.Duration, owner string, err error) {
	grace = defaultGrace(s.TTL)
	if fs.isSet("kill-grace") {
		grace = fs.duration("kill-grace", 0)
		if err := checkGrace(grace, s); err != nil {
			return 0, "", usagef("invalid --kill-grace %s: %v", fs.str("kill-grace"), err)
		}
	}
	if fs.isSet("owner") {
		owner = fs.str("owner")
		if owner == "" { // to the library, the default owner
			return 0, "", usagef("invalid --owner %s: owner is empty", quoteArg(owner))
		}
		if err := (pglease.Config{Owner: owner}).Validate(); err != nil {
			return 0, "", usagef("invalid --owner %s: %s", quoteArg(owner), reason(err))
		}
	}
	return grace, owner, nil
}

// defaultGrace is the kill grace without --kill-grace: min(TTL/4, 10s).
func defaultGrace(ttl time.Duration) time.Duration { return min(ttl/4, 10*time.Second) }

// checkGrace refuses a kill grace that would terminate a healthy command:
// SIGTERM is due at the lease's local deadline minus the grace, so the
// first renewal (sent RenewInterval after the acquisition) must have time
// to succeed before then. The renewal is given half its interval, at most
// a second, to complete.
func checkGrace(grace time.Duration, s pglease.Plan) error {
	room := min(s.RenewInterval/2, time.Second)
	deadline := s.TTL - s.SafetyMargin // after each renewal is sent
	limit := (deadline - s.RenewInterval - room).Truncate(time.Millisecond)
	switch {
	case grace <= 0:
		return errors.New("it must be positive")
	case grace > limit:
		return fmt.Errorf("with a %s TTL, SIGTERM would be due %s after each renewal is sent (the local deadline %s minus the grace), before the next renewal, sent after %s, can be confirmed: a healthy command would be killed; use at most %s, or raise --ttl",
			s.TTL, max(deadline-grace, 0), deadline, s.RenewInterval.Round(time.Millisecond), limit)
	}
	return nil
}

// exitRunFailure is pglease run's own failure (usage, invalid input,
// database unreachable or refusing us), as timeout(1) and env(1) report
// theirs, so that it is never mistaken for COMMAND's own status.
const exitRunFailure = 125

// runFailure reports a failure of pglease run itself and returns 125.
func (e *env) runFailure(err error) int {
	e.fail(err)
	return exitRunFailure
}

func (e *env) cmdRun(ctx context.Context, args []string) int {
	// Catch the forwarded signals first: one that arrives while connecting
	// or waiting ends the wait.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	o, code, done := e.parseRun(args)
	if done {
		return code
	}
	if !supported {
		return e.runFailure(errors.New("pglease run is not supported on this platform"))
	}

	// waitCtx ends on the first signal.
	waitCtx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	var gotSig os.Signal
	sigDone := make(chan struct{})
	go func() {
		defer close(sigDone)
		select {
		case gotSig = <-sigs:
			cancelWait()
		case <-waitCtx.Done():
		}
	}()
	stopWatch := func() (os.Signal, bool) {
		cancelWait()
		<-sigDone
		return gotSig, gotSig != nil
	}

	stopJobControl := e.holdJobControl()
	defer stopJobControl()
	surviveBrokenPipe()
	c, err := pglease.Open(waitCtx, o.dsn, pglease.Config{Table: o.table, Owner: o.owner, TTL: o.ttl, Observer: &e.renewals})
	if err != nil {
		if sig, ok := stopWatch(); ok {
			return 128 + sigNum(sig)
		}
		return e.runFailure(err)
	}
	// Closing waits for the database at most this long; after a lost lease
	// not at all: the exit 76 must not wait on a database that may be why
	// the lease was lost, and a lost lease has nothing to release.
	closeWait := 2 * time.Second
	defer func() { closeBounded(c, closeWait) }()
	o.owner = c.Owner() // without --owner, the library's default: PGLEASE_OWNER
	if err := e.prepareTable(waitCtx, c, o.table); err != nil {
		if sig, ok := stopWatch(); ok {
			return 128 + sigNum(sig)
		}
		return e.runFailure(err)
	}

	opts := o.leaseOptions()
	began := time.Now() // --timeout counts from the first attempt
	acquire := func() (*pglease.Lease, error) {
		if !o.wait {
			return c.TryAcquire(waitCtx, o.name, opts...)
		}
		actx, cancel := waitCtx, context.CancelFunc(func() {})
		if o.timeout > 0 {
			actx, cancel = context.WithTimeout(waitCtx, o.timeout-time.Since(began))
		}
		defer cancel()
		return c.Acquire(actx, o.name, opts...)
	}
	lease, err := acquire()
	sig, signalled := stopWatch()
	if err == nil && signalled { // a signal raced with the acquisition
		_ = lease.Release(ctx)
		err = context.Canceled
	}
	if err != nil {
		var held *pglease.HeldError
		var kind *pglease.KindError
		switch {
		case signalled:
			return 128 + sigNum(sig)
		case errors.As(err, &held):
			if o.conflict != 0 { // 0: a skipped run is a success, and quiet
				fmt.Fprintln(e.stderr, e.redact(held.Error()))
			}
			return o.conflict
		case errors.As(err, &kind):
			// Not a conflict: waiting would not end it, and the conflict
			// code must never hide a misconfiguration.
			flags := "no --slots"
			switch {
			case o.shared:
				flags = "--shared"
			case o.slots > 1:
				flags = fmt.Sprintf("--slots %d", o.slots)
			case o.quota > 0:
				flags = fmt.Sprintf("--quota %d", o.quota)
			}
			return e.runFailure(fmt.Errorf("%s is held as a %s; this run asked for a %s (%s): use the same --slots or --quota for every run of %s (--shared runs and plain runs of a name go together, a semaphore's or a quota's do not), or wait until its leases are released",
				quoteArg(kind.Name), kind.Have, kind.Want, flags, quoteArg(kind.Name)))
		case o.wait && errors.Is(err, context.DeadlineExceeded):
			// Acquire only matches a *HeldError when it saw the lease held;
			// otherwise every attempt failed.
			return e.runFailure(fmt.Errorf("could not acquire %s within --timeout %s: the database kept failing (see earlier errors, or check that it is reachable)", quoteArg(o.name), o.timeout))
		}
		return e.runFailure(err)
	}
	code = e.hold(ctx, o, lease, sigs)
	if code == exitLost {
		closeWait = 0
	}
	return code
}

// hold runs the command under a held lease and returns the exit status.
// A --max-hold counts from here, before the command starts: the command
// runs at most that long, and pglease releases the lease once its group is
// gone (the library's WithMaxHold would free the row at the limit itself,
// while the group might still be dying).
func (e *env) hold(ctx context.Context, o runOptions, lease *pglease.Lease, sigs chan os.Signal) int {
	held := time.Now()
	session := e.sessionFile(lease, o.fast)
	sup, err := startSupervisor(child{path: o.path, argv: o.command, env: childEnv(os.Environ(), leaseVars(o, lease)),
		grace: o.grace, stdin: true, deadline: lease.Deadline(), session: session}, e)
	if session != nil {
		session.Close() // the supervisor has its copy
	}
	if err != nil {
		_ = lease.Release(ctx)
		return e.runFailure(err)
	}
	renewed, unsubscribe := e.renewals.subscribe()
	defer unsubscribe()
	g := guard{lease: lease, sup: sup, grace: o.grace, sigs: sigs, renewed: renewed}
	if o.maxHold > 0 {
		g.holdEnd, g.maxHold = held.Add(o.maxHold), o.maxHold
	}
	terminated := e.guard(g)
	var holdTerm time.Time // when --max-hold's SIGTERM was due
	if o.maxHold > 0 {
		holdTerm = g.holdEnd.Add(-o.grace)
	}
	return e.finish(ctx, lease, sup, terminated, holdTerm)
}

// sessionFile is a copy of the database session a lease acquired with
// fast failover (fast) is bound to, for the supervisor to hold (see
// supervise_unix.go), or nil.
func (e *env) sessionFile(lease *pglease.Lease, fast bool) *os.File {
	if !fast {
		return nil
	}
	f, err := lease.SessionFile()
	if err != nil {
		fmt.Fprintf(e.stderr, "%s\npglease: warning: without a copy of its database session, if pglease is killed, a waiter may take lease %s over before the command's process group is dead\n",
			e.redact(err.Error()), quoteArg(lease.Name()))
		return nil
	}
	return f
}

// finish runs once the command and everything in its group are gone;
// holdTerm is when the SIGTERM of the run's --max-hold was due, or zero.
func (e *env) finish(ctx context.Context, lease *pglease.Lease, sup *supervisor, terminating bool, holdTerm time.Time) int {
	if terminating || lease.Context().Err() != nil && errors.Is(context.Cause(lease.Context()), pglease.ErrLeaseLost) {
		// Exit without waiting for the database: a lost lease has nothing
		// to release, and one whose renewals were failing expires by
		// itself. A lease still valid (a late renewal got through) gets one
		// short release attempt so that a waiter need not wait out the TTL;
		// one ended at its --max-hold, on a healthy database, a full one.
		if !holdTerm.IsZero() && lease.Context().Err() == nil && !time.Now().Before(holdTerm) {
			if err := lease.Release(ctx); err != nil {
				fmt.Fprintln(e.stderr, e.redact(err.Error()))
			}
			return exitLost
		}
		if lease.Context().Err() == nil {
			done := make(chan struct{})
			go func() { _ = lease.Release(ctx); close(done) }()
			select {
			case <-done:
			case <-time.After(300 * time.Millisecond):
			}
		}
		return exitLost
	}
	if err := lease.Release(ctx); err != nil {
		fmt.Fprintln(e.stderr, e.redact(err.Error()))
	}
	if sup.err != nil {
		fmt.Fprintf(e.stderr, "pglease: %s\n", sup.err)
	}
	return sup.code
}

// leaseVars are the variables that tell COMMAND about its lease. With
// slots, PGLEASE_NAME is still NAME, PGLEASE_SLOT says which slot (the
// lease NAME#SLOT) and PGLEASE_TOKEN is that slot's
// fencing token.
func leaseVars(o runOptions, lease *pglease.Lease) []string {
	vars := []string{"PGLEASE_NAME=" + o.name, "PGLEASE_OWNER=" + o.owner, fmt.Sprintf("PGLEASE_TOKEN=%d", lease.Token())}
	if o.slots > 0 {
		p, _ := (pglease.Config{}).Plan(o.name, pglease.WithSlots(o.slots)) // checked by parseRun
		vars = append(vars, "PGLEASE_SLOT="+strconv.Itoa(max(slices.Index(p.Names, lease.Name()), 0)))
	}
	return vars
}

// childEnv is env with vars ("KEY=value") set: the variables of vars and
// of leaseVarNames in pglease's own environment are dropped, so that
// COMMAND never sees a stale one (say PGLEASE_SLOT of an outer run).
func childEnv(env []string, vars []string) []string {
	set := func(k string) bool {
		return slices.ContainsFunc(vars, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	}
	out := make([]string, 0, len(env)+len(vars))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); slices.Contains(leaseVarNames, k) || set(k) {
			continue
		}
		out = append(out, kv)
	}
	return append(out, vars...)
}

// leaseVarNames are the variables pglease run sets for COMMAND.
var leaseVarNames = []string{"PGLEASE_NAME", "PGLEASE_OWNER", "PGLEASE_TOKEN", "PGLEASE_SLOT"}

// closeBounded closes c but waits at most d: with the database gone the
// process must still exit promptly.
func closeBounded(c *pglease.Client, d time.Duration) {
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func sigNum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 15
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}
