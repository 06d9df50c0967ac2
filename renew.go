package pglease

import (
	"context"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// renewer is the part of a Client that owns the renew loop's kick and
// its schedule. Its fields are guarded by mu.
type renewer struct {
	mu      sync.Mutex
	kick    chan struct{} // kicks the renew loop; nil until it starts
	nextDue time.Time     // when the loop will next renew; zero while it computes that
}

// setDue records when the loop will next renew.
func (r *renewer) setDue(due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextDue = due
}

// startRenewer starts the renewal loop once, and tells it about a new
// lease that needs renewing before the loop's next round. register calls
// it with reg.mu held, having found the client open: Close has not begun
// to wait for the client's goroutines (see register), so the loop starts.
func (c *Client) startRenewer(l *Lease) {
	r := &c.renewer
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kick == nil {
		kick := make(chan struct{}, 1)
		r.kick = kick
		c.life.goBackground(func() { c.renewLoop(kick) })
	}
	if r.nextDue.IsZero() || l.sent.Add(c.renewEvery(l.ttl)).Before(r.nextDue) {
		wake(r.kick)
	}
}

// renewLoop renews every held lease with one statement when the first of
// them is due (a third of its TTL after its last renewal, by default), so
// the load on the server grows with clients, not leases.
func (c *Client) renewLoop(kick <-chan struct{}) {
	b := retryRenew.start()
	var retryAt time.Time
	for {
		// While this round computes, nextDue is unknown: every new lease
		// kicks the loop, and the kick waits in the channel.
		c.renewer.setDue(time.Time{})
		leases := c.reg.leases()
		var due time.Time
		for _, l := range leases {
			l.mu.Lock()
			d := l.sent.Add(c.renewEvery(l.ttl))
			l.mu.Unlock()
			if due.IsZero() || d.Before(due) {
				due = d
			}
		}
		if !retryAt.IsZero() && (due.IsZero() || retryAt.Before(due)) {
			due = retryAt
		}
		c.renewer.setDue(due)
		var timer <-chan time.Time
		var t *time.Timer
		if !due.IsZero() {
			t = time.NewTimer(time.Until(due))
			timer = t.C
		}
		fired := false
		select {
		case <-c.life.bg.Done():
		case <-kick: // leases changed: recompute
		case <-timer:
			fired = true
		}
		if t != nil {
			t.Stop()
		}
		if c.life.bg.Err() != nil {
			return
		}
		if !fired {
			continue
		}
		if len(leases) == 0 {
			continue
		}
		if _, err := c.renew(c.life.bg, leases); err != nil {
			if c.life.bg.Err() != nil {
				return
			}
			c.cfg.Logger.WarnContext(c.life.bg, "pglease: renewal failed; retrying", "err", err, "leases", len(leases))
			retryAt = time.Now().Add(b.next())
			continue
		}
		b.reset()
		retryAt = time.Time{}
	}
}

// renew renews leases in one statement on the dedicated connection and
// returns those found lost (taken over or force-released), which it ends.
// The statement never runs past the last local deadline of the batch, and
// runs before any queued acquisition. A session-bound lease is renewed only
// from the session that holds its lock. When a guarded transaction has a
// row locked, the others are renewed and the error is errRowBusy.
func (c *Client) renew(ctx context.Context, leases []*Lease) (lost []*Lease, err error) {
	s, err := c.session()
	if err != nil {
		return nil, err
	}
	live := make([]*Lease, 0, len(leases))
	var last time.Time
	for _, l := range leases {
		if l.err() != nil {
			continue
		}
		live = append(live, l)
		if dl := l.Deadline(); dl.After(last) {
			last = dl
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	// Past the last deadline of the batch the reply is useless: each
	// lease's own timer has ended it, and a late reply cannot revive it.
	timeout := min(time.Until(last), c.cfg.StatementTimeout)
	if timeout <= 0 {
		return nil, nil
	}
	var res store.RenewResult
	var epoch uint64
	sent := time.Now()
	err = s.doFirst(ctx, timeout, func(ctx context.Context, q store.Querier, st *sessState) error {
		sent = time.Now()
		epoch = st.epoch
		batch := make(map[string]int64, len(live))
		for _, l := range live {
			if !l.session || l.epoch == st.epoch {
				batch[l.name] = l.token
			}
		}
		if len(batch) == 0 {
			return nil
		}
		var err error
		res, err = c.st.Renew(ctx, q, batch, c.id)
		return err
	})
	if c.tableLost(ctx, err) {
		// The table is gone, and every row in it: the leases are lost,
		// and renewing them until their deadlines would only fail.
		for _, l := range live {
			l.lose(c.lostTableCause())
		}
		return live, nil
	}
	if err != nil {
		return nil, err
	}
	latency := time.Since(sent)
	if n := len(res.Renewed); n > 0 {
		c.events.send(Event{Kind: EventHeartbeat, Owner: c.cfg.Owner, Latency: latency, Count: n})
	}
	for _, l := range live {
		switch {
		case l.session && l.epoch != epoch:
			l.lose(sessionEnded("its database session ended"))
			lost = append(lost, l)
		case res.Renewed[l.name]:
			if l.extend(sent) {
				c.events.send(Event{Kind: EventRenewed, Name: l.name, Owner: c.cfg.Owner, Token: l.token, Latency: latency})
				if res.StepDown[l.name] {
					l.requestStepDown() // the notification was lost, or this client does not listen
				}
			} else if l.err() == nil {
				l.expire() // renewed after its deadline: it stays lost
			}
		case res.Busy[l.name]:
			// Still held; a guarded transaction has its row locked.
		case l.err() == nil:
			l.lose(&lostError{why: "its row was taken over, force-released or expired"})
			lost = append(lost, l)
		}
	}
	if len(res.Busy) > 0 {
		return lost, errRowBusy
	}
	return lost, nil
}
