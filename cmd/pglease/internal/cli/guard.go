package cli

// The guard: what pglease run does while COMMAND runs under the lease,
// and how the lease's end reaches COMMAND.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/pglease/pglease"
)

// child is a command to run under a supervisor (see startSupervisor).
type child struct {
	path     string   // the executable
	argv     []string // its arguments, argv[0] first
	env      []string
	grace    time.Duration // SIGTERM to SIGKILL, for what is left of its group when it exits
	stdin    bool          // it reads pglease's stdin; else /dev/null
	deadline time.Time     // the lease's local deadline as the command starts
	session  *os.File      // a copy of the lease's database session, or nil
}

// guard is a running command and the lease it runs under.
type guard struct {
	lease *pglease.Lease
	sup   *supervisor
	grace time.Duration
	sigs  <-chan os.Signal // signals to forward to the command
	// renewed wakes the guard after a renewal of any lease, so that it
	// passes the new deadline on at once.
	renewed <-chan struct{}
	// holdEnd, when not zero, is when the command must be gone for
	// --max-hold (maxHold): SIGTERM at holdEnd minus the grace, SIGKILL
	// at holdEnd, as on a lost lease.
	holdEnd time.Time
	maxHold time.Duration
	// stop, once closed, gives the command the grace to end (pglease cron
	// is stopping; the signal itself comes on sigs); kill, once closed,
	// ends it at once. nil for never.
	stop, kill <-chan struct{}
}

// guard keeps the command within its lease and returns once the command
// and everything in its group are gone. It reports whether the group was
// terminated for the lease's sake (lost, its renewals failing, or its
// --max-hold reached).
func (e *env) guard(g guard) (terminated bool) {
	var (
		terminating bool      // SIGTERM sent to the group because of the lease
		killed      bool      // SIGKILL sent
		killAt      time.Time // when SIGKILL is due; zero: not yet
		lost        = g.lease.Context().Done()
		stepDown    = g.lease.StepDownRequested()
		stop, kill  = g.stop, g.kill
		name        = quoteArg(g.lease.Name())
	)
	killBy := func(t time.Time) {
		if killAt.IsZero() || t.Before(killAt) {
			killAt = t
		}
	}
	// Every signal goes out before the lines that report it: a message,
	// however stuck stderr is, never delays the end of the command.
	terminate := func(why string, t time.Time, preface ...string) {
		if !terminating {
			terminating = true
			g.sup.terminate()
			for _, line := range preface {
				fmt.Fprintln(e.stderr, line)
			}
			fmt.Fprintf(e.stderr, "pglease: %s; terminating the command (SIGTERM, SIGKILL after %s)\n", why, g.grace)
		}
		killBy(t)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// The group must be dead by the lease's local deadline: SIGTERM at
		// deadline-grace, SIGKILL at the deadline. The supervisor sees to
		// it, told of every new deadline, so that it holds even while
		// pglease is stopped; once the supervisor is gone, the guard does.
		// Renewals move the deadline; a timer that fires early re-arms.
		now := time.Now()
		deadline := g.lease.Deadline()
		soft := deadline.Add(-g.grace)
		delegated := g.sup.enforcesDeadline()
		if delegated {
			g.sup.setDeadline(deadline)
		} else if !terminating && !now.Before(soft) && g.lease.Context().Err() == nil {
			terminate(fmt.Sprintf("renewals of lease %s are failing and its deadline is near", name), deadline)
		}
		if !g.holdEnd.IsZero() && !terminating && !now.Before(g.holdEnd.Add(-g.grace)) {
			terminate(fmt.Sprintf("lease %s reached its --max-hold of %s", name, g.maxHold), g.holdEnd)
		}
		if !killed && !killAt.IsZero() && !now.Before(killAt) {
			killed = true
			g.sup.kill()
		}
		if !killed {
			next := killAt
			if !terminating {
				if delegated && !now.Before(soft) {
					// The supervisor acts; look again soon in case it died.
					soft = now.Add(100 * time.Millisecond)
				}
				if next.IsZero() || soft.Before(next) {
					next = soft
				}
				if hold := g.holdEnd.Add(-g.grace); !g.holdEnd.IsZero() && hold.Before(next) {
					next = hold
				}
			}
			timer.Reset(max(time.Until(next), 0))
		}
		// The job gone comes first: a pglease resuming from a stop finds
		// the lease lost too, but the supervisor has ended the job already.
		select {
		case <-g.sup.done:
			return terminating || g.sup.lapsed
		default:
		}
		select {
		case s := <-g.sigs:
			g.sup.forward(s.(syscall.Signal))
		case <-stop:
			stop = nil
			killBy(time.Now().Add(g.grace))
		case <-kill:
			kill = nil
			killBy(time.Now())
		case <-stepDown:
			// pglease stepdown (or RequestStepDown) from anywhere: ask the
			// command to stop; the lease is released once its group is gone.
			stepDown = nil
			g.sup.forward(syscall.SIGTERM)
			fmt.Fprintf(e.stderr, "pglease: asked to step down from lease %s; sent SIGTERM to the command\n", name)
		case <-lost:
			lost = nil
			// The library's error says why it was lost, as is; the lines
			// after it say what pglease does about it.
			switch err := context.Cause(g.lease.Context()); {
			case errors.Is(err, pglease.ErrSessionLost):
				// A fast-failover waiter may hold the lease milliseconds
				// after the session ended: a grace period would be an
				// overlap.
				terminating = true
				if !killed {
					killed = true
					g.sup.kill()
					fmt.Fprintln(e.stderr, e.redact(err.Error()))
					fmt.Fprintf(e.stderr, "pglease: a waiter may already hold lease %s, so the command gets SIGKILL at once\n", name)
				}
			case errors.Is(err, pglease.ErrLeaseLost) && g.sup.enforcesDeadline() && !time.Now().Before(g.lease.Deadline().Add(-g.grace)):
				// Lost at its deadline (pglease was stopped, or renewals
				// failed): the supervisor is ending the job by itself; the
				// guard only backs its SIGKILL up.
				terminating = true
				killBy(g.lease.Deadline())
			case errors.Is(err, pglease.ErrLeaseLost):
				terminate(fmt.Sprintf("lease %s lost", name),
					minTime(time.Now().Add(g.grace), g.lease.Deadline()), e.redact(err.Error()))
			}
		case <-g.renewed:
		case <-timer.C:
		case <-g.sup.done:
			return terminating || g.sup.lapsed
		}
	}
}

// renewals wakes the guards of running commands after every renewal (it
// is the observer of their clients).
type renewals struct {
	mu   sync.Mutex
	subs map[chan struct{}]bool
}

// Observe implements pglease.Observer.
func (r *renewals) Observe(ev pglease.Event) {
	if ev.Kind != pglease.EventRenewed {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// subscribe returns a channel that receives after renewals, and the
// function that ends the subscription.
func (r *renewals) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs == nil {
		r.subs = map[chan struct{}]bool{}
	}
	r.subs[ch] = true
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.subs, ch)
	}
}

// holdJobControl keeps job control (Ctrl-Z's SIGTSTP, SIGTTIN, SIGTTOU)
// from stopping pglease while it may hold a lease: stopped, it could not
// renew it, and the supervisor would end the command at the deadline. It
// says so once per signal, and returns the function that restores the
// default.
func (e *env) holdJobControl() (stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, jobControl...)
	done := make(chan struct{})
	go func() {
		told := map[os.Signal]bool{}
		for {
			select {
			case s := <-ch:
				if !told[s] {
					told[s] = true
					fmt.Fprintf(e.stderr, "pglease: ignoring %s: a stopped pglease could not keep its lease; to stop the command, stop or end it by its own pid\n", signalName(s.(syscall.Signal)))
				}
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}
