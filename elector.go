package pglease

import (
	"context"
	"errors"
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
	opts []Option

	mu      sync.Mutex
	running bool
	term    *Lease
	resign  context.CancelCauseFunc
}

// NewElector returns an elector for name. Each time this instance is
// elected, lead is called with a context that is cancelled when leadership
// ends (lease lost, [Elector.Resign], or Run's context cancelled); lead
// should return promptly then. Like [Lease.Context], its Err reports a
// lost lease as soon as the local deadline has passed, even to a goroutine
// resuming from a pause before the deadline timer ran. When lead returns, the lease is released and
// the instance campaigns again. Options apply to every term's lease
// ([WithTTL], [WithFastFailover]…); [WithSlots] is refused with
// [ErrInvalidArgument], as an election has one leader.
func (c *Client) NewElector(name string, lead func(ctx context.Context) error, opts ...Option) (*Elector, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if lead == nil {
		return nil, errorf("%w: NewElector: lead function is nil", ErrInvalidArgument)
	}
	if o, err := c.leaseOptions(opts); err != nil {
		return nil, err
	} else if err := o.checkElector(); err != nil {
		return nil, err
	}
	return &Elector{c: c, name: name, lead: lead, opts: opts}, nil
}

// Run campaigns until ctx ends or the client is closed, leading whenever
// elected. It returns ctx's error (or [ErrClosed]) after the last term's
// lead function returned and its lease was released. Errors of lead are
// logged through the client's logger and do not stop the campaign.
func (e *Elector) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return errors.New("pglease: Elector.Run called twice")
	}
	e.running = true
	e.mu.Unlock()
	for {
		l, err := e.c.Acquire(ctx, e.name, e.opts...)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrClosed) || !IsRetryable(err) && !errors.Is(err, ErrNotAcquired) {
				return err
			}
			select { // transient: Acquire already retried; pause before campaigning again
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		resigned := e.serve(ctx, l)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if resigned {
			e.yield(ctx)
		}
	}
}

// serve runs one term and reports whether it ended by Resign.
func (e *Elector) serve(ctx context.Context, l *Lease) bool {
	// Like the lease's own context, tctx checks the deadline on Err.
	tctx, cancel := withLease(ctx, l)
	e.mu.Lock()
	e.term, e.resign = l, cancel
	e.mu.Unlock()
	err := e.callLead(tctx)
	// Read before cancel(nil) ends the term's context: an error of lead
	// while its term still ran is worth logging; one after the term ended
	// is lead's answer to that end.
	ended := tctx.Err() != nil
	resigned := errors.Is(context.Cause(tctx), errResigned)
	cancel(nil)
	e.mu.Lock()
	e.term, e.resign = nil, nil
	e.mu.Unlock()
	if err != nil && !ended {
		e.c.cfg.Logger.Error("pglease: leader function failed", "name", e.name, "err", err)
	}
	_ = l.Release(context.WithoutCancel(ctx))
	return resigned
}

func (e *Elector) callLead(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.c.cfg.Logger.Error("pglease: leader function panicked", "name", e.name, "panic", r)
			err = errors.New("pglease: leader function panicked")
		}
	}()
	return e.lead(ctx)
}

// yield lets another instance take over after a resignation: it waits
// until someone else leads, or a short while.
func (e *Elector) yield(ctx context.Context) {
	deadline := time.Now().Add(e.c.cfg.PollInterval)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		info, err := e.Leader(ctx)
		if err == nil && info.Owner != e.c.cfg.Owner {
			return
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
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
	return e.term != nil && e.term.Err() == nil
}

// Leader returns the current leader as the server sees it, or an error
// matching [ErrNoLease] when nobody leads.
func (e *Elector) Leader(ctx context.Context) (Info, error) {
	info, err := e.c.Get(ctx, e.name)
	if err != nil {
		return Info{}, err
	}
	if !info.Held() {
		return Info{}, ErrNoLease
	}
	return info, nil
}

// Observe sends the leader each time it changes (an empty Info when nobody
// leads), starting with the current one, until ctx ends; then it closes
// the channel. Changes are seen through release notifications, at the
// moment the leader's lease would expire, and at least every
// [Config.PollInterval]. Slow receivers miss intermediate leaders, never
// the latest.
func (e *Elector) Observe(ctx context.Context) <-chan Info {
	out := make(chan Info, 1)
	if _, err := e.c.session(); err != nil { // listener for release notifications
		close(out)
		return out
	}
	started := e.c.goBackground(func() {
		defer close(out)
		woken, unsubscribe := e.c.hub.subscribe(e.name)
		defer unsubscribe()
		var last Info
		first := true
		recheck := time.Duration(0)
		for {
			info, err := e.Leader(ctx)
			wait := e.c.cfg.PollInterval
			switch {
			case err == nil:
				wait = min(wait, info.Remaining+5*time.Millisecond)
			case errors.Is(err, ErrNoLease):
				info = Info{}
			default:
				info = last // a read error is not a change
			}
			if first || info.Owner != last.Owner || info.Token != last.Token {
				first = false
				last = info
				select { // keep only the latest for a slow receiver
				case <-out:
				default:
				}
				out <- info
			}
			if recheck > 0 { // just after a release a successor may be acquiring
				wait = min(wait, recheck)
				recheck = min(recheck*2, time.Second)
				if recheck >= time.Second {
					recheck = 0
				}
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-e.c.bg.Done():
				t.Stop()
				return
			case <-woken.ch:
				recheck = 10 * time.Millisecond
			case <-t.C:
			}
			t.Stop()
		}
	})
	if !started {
		close(out)
	}
	return out
}
