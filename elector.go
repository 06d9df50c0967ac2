package pglease

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Elector runs a leader election on one lease name: every instance runs an
// Elector, and at most one of them leads at a time. It is safe for
// concurrent use; [Elector.Run] may be called once.
//
// Unlike client-go's leaderelection, the lead function runs on Run's own
// goroutine: Run returns only after it has returned and the lease was
// released, so two terms of one process never overlap, and lead is never
// "stopped" in a process that never led.
type Elector struct {
	c    *Client
	name string
	lead func(ctx context.Context) error
	cfg  ElectorConfig // defaults filled in

	// What the exported API does not give of the client (hooks.go).
	env recipeEnv

	mu      sync.Mutex
	running bool
	term    *Lease
	resign  context.CancelCauseFunc
	events  electorEvents // what observers were told (elector_events.go)
	health  electorHealth // when the term ended (elector_health.go)
}

// ElectorConfig configures an [Elector]. The zero value is valid: every
// field has a documented default; a negative duration is refused with
// an *[InvalidError].
type ElectorConfig struct {
	// LeaseOptions apply to every term's lease ([WithTTL],
	// [WithFastFailover]…). [WithSlots] and [WithShared] are refused
	// with an *[InvalidError], as an election has one leader.
	LeaseOptions []Option
	// StepDownHoldOff is how long the elector stays out of the election
	// after it stepped down at a request ([Client.RequestStepDown]), or
	// after a term reached its maximum hold ([WithMaxHold] in
	// LeaseOptions, which limits every term): it
	// campaigns again as soon as another instance leads, or once the
	// hold-off has passed if none does. Default: the client's
	// [Config.PollInterval].
	StepDownHoldOff time.Duration
	// HealthTolerance is how long the lead function may run on after its
	// term ended before [Elector.Check] reports the elector unhealthy.
	// Default: the renewal interval of the term's lease
	// ([Config.RenewInterval], by default a third of the TTL). Set it to
	// what lead needs to stop cleanly, and keep the probe's period times
	// its failure threshold well above it.
	HealthTolerance time.Duration
}

// NewElector returns an elector for name. Each time this instance is
// elected, lead is called with a context that is cancelled when leadership
// ends (lease lost, [Elector.Resign], a step-down request from any client
// ([Client.RequestStepDown]; the context's cause is then [ErrStepDown]), or
// Run's context cancelled); lead
// should return promptly then. Like [Lease.Context], its Err reports a
// lost lease as soon as the local deadline has passed, even to a goroutine
// resuming from a pause before the deadline timer ran. When lead returns,
// the lease is released and the instance campaigns again. cfg configures
// the elector and every term's lease; its zero value is the defaults.
func (c *Client) NewElector(name string, lead func(ctx context.Context) error, cfg ElectorConfig) (*Elector, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if lead == nil {
		return nil, invalid(kindArgument, "NewElector: lead function is nil")
	}
	env := c.recipe()
	o, err := env.options(entryElector, cfg.LeaseOptions)
	if err != nil {
		return nil, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"StepDownHoldOff", cfg.StepDownHoldOff}, {"HealthTolerance", cfg.HealthTolerance}} {
		if d.v < 0 {
			return nil, invalid(kindArgument, "NewElector: ElectorConfig.%s must not be negative, got %s", d.name, d.v)
		}
	}
	if cfg.StepDownHoldOff == 0 {
		cfg.StepDownHoldOff = env.poll
	}
	if cfg.HealthTolerance == 0 { // every term's lease has the TTL o.ttl
		cfg.HealthTolerance = env.renewFor(o.ttl)
	}
	cfg.LeaseOptions = slices.Clone(cfg.LeaseOptions)
	return &Elector{c: c, name: name, lead: lead, cfg: cfg, env: env}, nil
}

// Run campaigns until ctx ends or the client is closed, leading whenever
// elected. It returns ctx's error (or [ErrClosed]) after the last term's
// lead function returned and its lease was released. Errors of lead are
// logged through the client's logger and do not stop the campaign. With
// an [Observer] in the client's Config, Run reports its terms and the
// leaders it sees ([EventElected], [EventDemoted], [EventLeaderChanged]).
func (e *Elector) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return errors.New("pglease: Elector.Run called twice")
	}
	e.running = true
	e.mu.Unlock()
	defer e.watchLeaders(ctx)() // EventLeaderChanged while campaigning
	for {
		l, err := e.c.Acquire(ctx, e.name, e.cfg.LeaseOptions...)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrClosed) || !IsRetryable(err) && !errors.Is(err, ErrNotAcquired) {
				return err
			}
			select { // transient: Acquire already retried; pause before campaigning again
			case <-time.After(campaignPause):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		why := e.serve(ctx, l)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch why {
		case errResigned:
			e.yield(ctx, e.env.poll)
		case ErrStepDown, ErrHoldLimit:
			e.yield(ctx, e.cfg.StepDownHoldOff)
		}
	}
}

// serve runs one term and returns errResigned, ErrStepDown or
// ErrHoldLimit when it ended by Resign, by a step-down request or at the
// lease's maximum hold ([WithMaxHold]), else nil.
func (e *Elector) serve(ctx context.Context, l *Lease) error {
	// Like the lease's own context, tctx checks the deadline on Err.
	tctx, cancel := withLease(ctx, l)
	e.mu.Lock()
	e.term, e.resign = l, cancel
	e.elected(l)
	e.mu.Unlock()
	// Through the client's door for goroutines, so that Close waits for
	// it: it returns once the term ends, and Close ends the term's lease
	// before it waits. Once Close waits, it starts no more, and the term
	// (its lease ended by Close) needs no watch.
	e.env.goBackground(func(context.Context) {
		select {
		case <-l.StepDownRequested():
			cancel(ErrStepDown)
		case <-tctx.Done():
		}
	})
	stopWatch := context.AfterFunc(tctx, func() { e.termEnded(l, tctx) })
	err := e.callLead(tctx)
	// Read before cancel(nil) ends the term's context: an error of lead
	// while its term still ran is worth logging; one after the term ended
	// is lead's answer to that end.
	ended := tctx.Err() != nil
	var ending error // errResigned or ErrStepDown, for Run
	switch cause := context.Cause(tctx); {
	case errors.Is(cause, errResigned):
		ending = errResigned
	case errors.Is(cause, ErrStepDown):
		ending = ErrStepDown
	case errors.Is(cause, ErrHoldLimit):
		ending = ErrHoldLimit
	}
	why := err // why the term ended, for EventDemoted
	if ended {
		why = context.Cause(tctx)
	}
	if ending == errResigned {
		why = nil
	}
	stopWatch()
	cancel(nil)
	e.mu.Lock()
	e.term, e.resign = nil, nil
	e.demoted(l, why)
	e.mu.Unlock()
	if err != nil && !ended {
		e.env.log.ErrorContext(ctx, "pglease: leader function failed", "name", e.name, "err", err)
	}
	_ = l.Release(context.WithoutCancel(ctx))
	return ending
}

func (e *Elector) callLead(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.env.log.ErrorContext(ctx, "pglease: leader function panicked", "name", e.name, "panic", r)
			err = errors.New("pglease: leader function panicked")
		}
	}()
	return e.lead(ctx)
}

// yield lets another instance take over after a resignation or a
// step-down: it waits until someone else leads, or for d. It reads the
// leader as Observe does (on release notifications, not by polling), so a
// long hold-off costs the database next to nothing.
func (e *Elector) yield(ctx context.Context, d time.Duration) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	e.watch(wctx, e.leader, func(info Info) {
		if info.Owner != "" && info.Owner != e.c.Owner() {
			cancel()
		}
	})
}

// Resign ends the current term, if this instance leads: lead's context is
// cancelled, and once lead returns the lease is released. The elector then
// gives other instances a chance to take over before campaigning again.
func (e *Elector) Resign() {
	e.mu.Lock()
	cancel := e.resign
	e.mu.Unlock()
	if cancel != nil {
		cancel(errResigned)
	}
}

// IsLeader reports whether this instance leads now.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term != nil && causeOf(e.term.Context()) == nil
}

// leader returns the current leader as the server sees it, or an error
// matching [ErrNoLease] when nobody leads. (Callers outside read it with
// [Client.Get]: a leader is a lease with Remaining > 0.)
func (e *Elector) leader(ctx context.Context) (Info, error) {
	info, err := e.c.Get(ctx, e.name)
	if err != nil {
		return Info{}, err
	}
	if info.Remaining <= 0 {
		return Info{}, ErrNoLease
	}
	return info, nil
}

// Observe sends the leader each time it changes (an empty Info when nobody
// leads), starting with the current one, until ctx ends; then it closes
// the channel. Changes are seen through release notifications (a release
// that wakes a queued waiter or leaves the lease free; not those within a
// burst, while a client takes the name again at once: see "Waiting" in the
// package documentation), at the moment the leader's lease would expire,
// and at least every [Config.PollInterval]. Slow receivers miss
// intermediate leaders, never the latest.
func (e *Elector) Observe(ctx context.Context) <-chan Info {
	out := make(chan Info, 1)
	started := e.env.goBackground(func(context.Context) {
		defer close(out)
		var last Info
		first := true
		e.watch(ctx, e.leader, func(info Info) {
			if !first && info.Owner == last.Owner && info.Token == last.Token {
				return
			}
			first = false
			last = info
			select { // keep only the latest for a slow receiver
			case <-out:
			default:
			}
			out <- info
		})
	})
	if !started {
		close(out)
	}
	return out
}

// watch reads the leader with read at once, then on every release
// notification of the name (and a few times shortly after, while a
// successor may be acquiring), at the moment the leader's lease would
// expire, and at least every [Config.PollInterval]. It passes each reading
// to seen (an empty Info when nobody leads) and skips failed reads. It
// returns when ctx ends or the client closes.
func (e *Elector) watch(ctx context.Context, read func(context.Context) (Info, error), seen func(Info)) {
	woken, stop := e.c.changes(e.name)
	defer stop()
	recheck := time.Duration(0)
	for {
		info, err := read(ctx)
		if errors.Is(err, ErrClosed) {
			return // the client is closing (changes woke us when it did)
		}
		wait := e.env.poll
		switch {
		case err == nil:
			wait = min(wait, info.Remaining+5*time.Millisecond)
			seen(info)
		case errors.Is(err, ErrNoLease):
			seen(Info{})
		}
		if recheck > 0 { // just after a release a successor may be acquiring
			wait = min(wait, recheck)
			recheck = min(recheck*2, recheckLargest)
			if recheck >= recheckLargest {
				recheck = 0
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-woken:
			recheck = recheckFirst
		case <-t.C:
		}
		t.Stop()
	}
}
