package pglease

import (
	"context"
	"strconv"
	"strings"

	"github.com/pglease/pglease/internal/store"
)

// RequestStepDown asks whoever holds name, in any process, to let go of it
// gracefully: for a rolling deploy, move leadership off the instance about
// to restart before it stops. An [Elector] leading name ends its term (its
// lead context is cancelled with the cause [ErrStepDown]), releases the
// lease and stays out of the election for its hold-off
// ([ElectorConfig.StepDownHoldOff]) so that another instance wins. A plain
// lease holder sees the request on [Lease.StepDownRequested] and decides
// for itself.
//
// The request is recorded on the lease's row and sent to the holder's
// client as a notification, which it hears at once when it listens (a
// client listens while it holds a lease whose holder watches
// [Lease.StepDownRequested], as an [Elector] does, unless
// [Config.DisableNotify] is set); otherwise, or when the notification is
// lost, the holder learns of it at its next renewal, at most a renewal
// interval later. A new acquisition of the name clears the
// request. RequestStepDown returns once the request is recorded, not once
// the holder has let go, an error matching [ErrNoLease] when nothing
// holds name, and [ErrNoTable] when there is no table (it never creates
// one). name may be a semaphore's slot ("name#i", see [WithSlots]).
func (c *Client) RequestStepDown(ctx context.Context, name string) error {
	if err := checkRowName(name); err != nil { // a semaphore's slot too
		return err
	}
	if err := c.prepareExisting(ctx); err != nil {
		return err
	}
	var ok bool
	err := c.retry(ctx, func() (err error) {
		ok, err = c.st.RequestStepDown(ctx, c.db, name)
		return err
	})
	if err != nil {
		return c.existingError(ctx, "request a step-down", err)
	}
	if !ok {
		return errorf("%w: nothing holds %q, so nobody was asked to step down", ErrNoLease, name)
	}
	return nil
}

// StepDownRequested returns a channel that is closed when some client asks
// the holder of this lease to let go ([Client.RequestStepDown]). The lease
// is still held: releasing it is up to the holder. The first call makes
// the client listen for requests while it holds the lease, so that the
// request arrives at once rather than with the next renewal (a lease whose
// holder never calls it hears of one with its renewals only).
func (l *Lease) StepDownRequested() <-chan struct{} {
	if !l.c.cfg.DisableNotify {
		// The session listens for requests while the lease is held.
		if s, err := l.c.session(); err == nil && l.c.reg.hearStepDowns(l) { // fails only once the client is closed
			s.poke()
		}
	}
	return l.stepDown
}

func (l *Lease) requestStepDown() {
	l.stepDownOnce.Do(func() { close(l.stepDown) })
}

// stepDownNotified handles a notification on the client's step-down
// channel: "token name".
func (c *Client) stepDownNotified(payload string) {
	tok, name, ok := strings.Cut(payload, " ")
	token, err := strconv.ParseInt(tok, 10, 64)
	if !ok || err != nil {
		return
	}
	if l := c.reg.lease(name); l != nil && l.token == token {
		l.requestStepDown()
	}
}

// pendingStepDowns delivers the step-down requests made of this client's
// leases while it was not listening (before its dedicated connection was
// up, or while it was down), on that connection once it listens.
func (c *Client) pendingStepDowns(q store.Querier) {
	held := c.reg.leases()
	if len(held) == 0 {
		return
	}
	tokens := make(map[string]int64, len(held))
	for _, l := range held {
		tokens[l.name] = l.token
	}
	ctx, cancel := context.WithTimeout(c.life.bg, c.cfg.StatementTimeout)
	defer cancel()
	names, err := c.st.StepDownsRequested(ctx, q, tokens)
	if err != nil {
		return // the next renewal reports them
	}
	for _, l := range held {
		if names[l.name] {
			l.requestStepDown()
		}
	}
}

// stepDownChannel is this client's step-down channel.
func (c *Client) stepDownChannel() string { return store.StepDownChannel(c.id) }
