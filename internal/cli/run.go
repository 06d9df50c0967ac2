package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pglease/pglease"
)

var runFlags = append([]flagSpec{
	{name: "ttl", kind: durationFlag, arg: "DURATION", usage: "lease TTL, at least 1s (default 30s)"},
	{name: "wait", kind: boolFlag, usage: "wait until the lease is free instead of exiting 75"},
	{name: "timeout", kind: durationFlag, arg: "DURATION", usage: "with --wait: give up after this long (exit 75, or 1 if the database kept failing)"},
	{name: "owner", kind: stringFlag, arg: "ID", usage: "owner label, e.g. a pod name (default hostname-pid-random)"},
	{name: "kill-grace", kind: durationFlag, arg: "DURATION", usage: "SIGTERM to SIGKILL grace when the lease is lost, below TTL/2 (default min(TTL/4, 10s))"},
	{name: "fast-failover", kind: boolFlag, usage: "tie the lease to the database session: a waiter takes over within milliseconds when this process dies"},
}, connFlags...)

type runOptions struct {
	name    string
	command []string
	path    string // command[0] looked up on PATH
	dsn     string
	table   string
	owner   string
	ttl     time.Duration
	wait    bool
	timeout time.Duration
	grace   time.Duration
	fast    bool
}

// parseRun validates everything about a run before anything connects.
func (e *env) parseRun(args []string) (o runOptions, code int, done bool) {
	fs, code, done := e.parse("run", runFlags, args)
	if done {
		return o, code, true
	}
	bad := func(err error) (runOptions, int, bool) { return o, e.usage("run", err), true }
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
	if o.ttl < time.Second || o.ttl > 100*365*24*time.Hour {
		return bad(usagef("invalid --ttl %s: it must be at least 1s", fs.str("ttl")))
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
	o.grace = min(o.ttl/4, 10*time.Second)
	if fs.isSet("kill-grace") {
		o.grace = fs.duration("kill-grace", 0)
		if o.grace <= 0 || o.grace >= o.ttl/2 {
			return bad(usagef("invalid --kill-grace %s: it must be positive and below half the TTL (%s)", fs.str("kill-grace"), o.ttl/2))
		}
	}
	o.owner = fs.str("owner")
	if fs.isSet("owner") && (o.owner == "" || len(o.owner) > 200 || strings.ContainsFunc(o.owner, func(r rune) bool { return r < ' ' || r == 0x7f })) {
		return bad(usagef("invalid --owner %s: 1 to 200 bytes without control characters", quoteArg(o.owner)))
	}
	o.fast = fs.boolean("fast-failover")
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
		return e.fail(errors.New("pglease run is not supported on this platform"))
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

	c, err := pglease.Open(waitCtx, o.dsn, pglease.Config{Table: o.table, Owner: o.owner, TTL: o.ttl})
	if err != nil {
		if sig, ok := stopWatch(); ok {
			return 128 + sigNum(sig)
		}
		return e.fail(err)
	}
	// Closing waits for the database at most this long; after a lost lease
	// not at all (SPEC: exit 76 without waiting for the database).
	closeWait := 2 * time.Second
	defer func() { closeBounded(c, closeWait) }()
	if err := c.Migrate(waitCtx); err != nil {
		if sig, ok := stopWatch(); ok {
			return 128 + sigNum(sig)
		}
		return e.fail(err)
	}

	opts := []pglease.Option{pglease.WithTTL(o.ttl)}
	if o.fast {
		opts = append(opts, pglease.FastFailover())
	}
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
	if o.fast && err == nil && !lease.SessionBound() {
		// The library binds it unless another session kept the name's lock
		// (e.g. a force-released holder that has not noticed yet).
		fmt.Fprintln(e.stderr, "pglease: warning: the lease is not bound to the database session; failover will take up to the TTL")
	}
	sig, signalled := stopWatch()
	if err == nil && signalled { // a signal raced with the acquisition
		_ = lease.Release(ctx)
		err = context.Canceled
	}
	if err != nil {
		var held *pglease.HeldError
		switch {
		case signalled:
			return 128 + sigNum(sig)
		case errors.As(err, &held):
			fmt.Fprintln(e.stderr, e.redact(held.Error()))
			return exitHeld
		case o.wait && errors.Is(err, context.DeadlineExceeded):
			// Acquire only matches a *HeldError when it saw the lease held;
			// otherwise every attempt failed.
			return e.fail(fmt.Errorf("could not acquire %s within --timeout %s: the database kept failing (see earlier errors, or check that it is reachable)", quoteArg(o.name), o.timeout))
		}
		return e.fail(err)
	}
	code = e.hold(ctx, o, lease, sigs)
	if code == exitLost {
		closeWait = 0
	}
	return code
}

// hold runs the command under a held lease and returns the exit status.
func (e *env) hold(ctx context.Context, o runOptions, lease *pglease.Lease, sigs chan os.Signal) int {
	env := childEnv(os.Environ(), o.name, lease.Owner(), lease.Token())
	sup, err := startSupervisor(o, env, e)
	if err != nil {
		_ = lease.Release(ctx)
		return e.fail(err)
	}
	var (
		terminating bool      // SIGTERM sent to the group because of the lease
		killed      bool      // SIGKILL sent
		killAt      time.Time // when SIGKILL is due once terminating
		lost        = lease.Done()
	)
	terminate := func(why string, killBy time.Time) {
		if !terminating {
			terminating = true
			fmt.Fprintf(e.stderr, "pglease: %s; terminating the command (SIGTERM, SIGKILL after %s)\n", why, o.grace)
			sup.terminate()
		}
		if killAt.IsZero() || killBy.Before(killAt) {
			killAt = killBy
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// The group must be dead by the lease's local deadline: SIGTERM at
		// deadline-grace, SIGKILL at the deadline. Renewals move the
		// deadline; a timer that fires early just re-arms.
		now := time.Now()
		deadline := lease.Deadline()
		if !terminating && !now.Before(deadline.Add(-o.grace)) && lease.Err() == nil {
			terminate("renewals of the lease are failing and its deadline is near", deadline)
		}
		if terminating && !killed && !now.Before(killAt) {
			killed = true
			sup.kill()
		}
		next := deadline.Add(-o.grace)
		if terminating {
			next = killAt
		}
		if !killed {
			timer.Reset(max(time.Until(next), 0))
		}
		select {
		case s := <-sigs:
			sup.forward(s.(syscall.Signal))
		case <-lost:
			lost = nil
			if errors.Is(lease.Err(), pglease.ErrLeaseLost) {
				terminate(fmt.Sprintf("lease %s lost: %s", quoteArg(o.name), strings.TrimPrefix(lease.Err().Error(), "pglease: lease lost: ")),
					minTime(time.Now().Add(o.grace), lease.Deadline()))
			}
		case <-timer.C:
		case <-sup.done:
			return e.finish(ctx, o, lease, sup, terminating)
		}
	}
}

// finish runs once the command and everything in its group are gone.
func (e *env) finish(ctx context.Context, o runOptions, lease *pglease.Lease, sup *supervisor, terminating bool) int {
	if terminating || errors.Is(lease.Err(), pglease.ErrLeaseLost) {
		// Exit without waiting for the database: a lost lease has nothing
		// to release, and one whose renewals were failing expires by
		// itself. A lease still valid (a late renewal got through) gets one
		// short release attempt so that a waiter need not wait out the TTL.
		if lease.Err() == nil {
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
		fmt.Fprintf(e.stderr, "pglease: %s\n", e.redact(strings.TrimPrefix(err.Error(), "pglease: ")))
	}
	if sup.err != nil {
		fmt.Fprintf(e.stderr, "pglease: %s\n", sup.err)
	}
	return sup.code
}

// childEnv is env with the lease variables set.
func childEnv(env []string, name, owner string, token int64) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		if strings.HasPrefix(kv, "PGLEASE_NAME=") || strings.HasPrefix(kv, "PGLEASE_OWNER=") || strings.HasPrefix(kv, "PGLEASE_TOKEN=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PGLEASE_NAME="+name, "PGLEASE_OWNER="+owner, fmt.Sprintf("PGLEASE_TOKEN=%d", token))
}

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
