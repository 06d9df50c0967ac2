package pglease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/store"
)

// Lease is a held lease. Its lifetime is its own: it is not bound to the
// context of the call that acquired it. It ends when released, when lost
// (see [Lease.Context]) or when its client is closed. Safe for concurrent use.
type Lease struct {
	c       *Client
	name    string
	token   int64
	ttl     time.Duration
	session bool // bound to the client's session (FastFailover)
	kind    kind // the kind of lease it was acquired as
	// of is the name a lease whose holders share a name holds a row
	// "of#i" of (see kind.keepsLocalSlot: a shared lease); "" for others.
	of     string
	epoch  uint64 // the session connection it is bound to
	slot   *localSlot
	ctx    context.Context
	cancel context.CancelCauseFunc

	stepDown     chan struct{} // closed when a step-down is requested of it
	stepDownOnce sync.Once
	// hearStepDown (under registry.mu): StepDownRequested was called
	// while the client held the lease, so it listens for step-down
	// requests until it ends (listen.go; counted in registry.hearing).
	hearStepDown bool

	mu       sync.Mutex
	sent     time.Time // send time of the last successful acquire/renew
	deadline time.Time // local safety deadline (monotonic)
	// holdEnd is when the lease ends at its maximum hold (WithMaxHold):
	// deadline never passes it. Zero: no limit.
	holdEnd time.Time
	maxHold time.Duration
	timer   *time.Timer
	ended   bool
	cause   error // why it ended, set with ended

	// announced: EventAcquired was sent (before ended was set), so its
	// end is to be reported; announcedAt is when, for the hold time.
	announced   bool
	announcedAt time.Time
}

// testHookEnding, when set by a test, runs in end between marking the
// lease ended and cancelling its context.
var testHookEnding atomic.Pointer[func(*Lease)]

func (c *Client) newLease(name string, token int64, o leaseOptions, sent time.Time, epoch uint64, sessionBound bool, slot *localSlot) *Lease {
	l := &Lease{c: c, name: name, token: token, ttl: o.ttl, session: sessionBound, epoch: epoch, slot: slot, sent: sent,
		stepDown: make(chan struct{})}
	inner, cancel := context.WithCancelCause(context.Background())
	l.ctx, l.cancel = leaseContext{inner, l}, cancel
	l.deadline = sent.Add(o.ttl - c.margin(o.ttl))
	if o.maxHold > 0 {
		l.maxHold, l.holdEnd = o.maxHold, sent.Add(o.maxHold)
		l.deadline = minTime(l.deadline, l.holdEnd)
	}
	return l
}

// arm starts the deadline timer of a lease handed to the caller. Leases
// that are only built to be released at once (an abandoned or late
// attempt) are never armed, so they never free the local slot.
func (l *Lease) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(time.Until(l.deadline), l.expire)
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Owner returns the owner label of the lease's client.
func (l *Lease) Owner() string { return l.c.cfg.Owner }

// Token returns the fencing token: strictly greater than the token of every
// earlier holder of the name. Pass it to the resources the lease protects.
func (l *Lease) Token() int64 { return l.token }

// TTL returns the lease's time-to-live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Context returns the lease's lifetime as a context: its Done channel is
// closed the moment the lease ends (released, lost or its client closed),
// and then context.Cause says why, with an error matching [ErrReleased],
// [ErrLeaseLost] or [ErrClosed]. Its Err never returns nil past the local
// deadline, even if the process was paused and the deadline timer has not
// run yet; check Err, not Cause alone, to learn whether the lease is still
// held. Run the work the lease protects under it.
func (l *Lease) Context() context.Context { return l.ctx }

// err returns nil while the lease is held, and afterwards why it ended:
// what a caller gets from Context's Err and then context.Cause.
func (l *Lease) err() error { return causeOf(l.ctx) }

// causeOf returns nil while ctx is live and context.Cause(ctx) once it
// has ended. Err comes first: a lease's or a set's context ends in its Err
// when the local deadline has passed.
func causeOf(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// leaseContext is the lease's context. Its Err checks the local deadline
// itself, so that a goroutine resuming from a pause (GC, SIGSTOP) sees the
// lease as lost before the deadline timer's goroutine gets to run.
type leaseContext struct {
	context.Context
	l *Lease
}

func (c leaseContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	c.l.settle()
	return c.Context.Err()
}

// settle ends the lease if its deadline has passed, and cancels the
// context of a lease that has ended but whose context another goroutine
// (the deadline timer, a renewal, Release) has not cancelled yet: the
// lease never looks held after its end or its deadline.
func (l *Lease) settle() {
	l.mu.Lock()
	past := !l.ended && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if past {
		l.expire()
	}
	l.mu.Lock()
	cause := l.cause
	l.mu.Unlock()
	if cause != nil {
		l.cancel(cause) // idempotent: the first cause wins
	}
}

// Deadline returns the local safety deadline: the lease is valid until then
// unless renewed (it is renewed in the background). It never passes the
// end of a maximum hold ([WithMaxHold]), which no renewal extends.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// extend moves the deadline after a renewal sent at sent succeeded. A
// renewal that arrives after the deadline cannot revive the lease.
func (l *Lease) extend(sent time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || !time.Now().Before(l.deadline) {
		return false // too late: the deadline timer ends it, if it has not yet
	}
	d := sent.Add(l.ttl - l.c.margin(l.ttl))
	if !l.holdEnd.IsZero() {
		d = minTime(d, l.holdEnd)
	}
	if d.After(l.deadline) {
		l.sent, l.deadline = sent, d
		if l.timer != nil {
			l.timer.Reset(time.Until(d))
		}
	}
	return true
}

// expire runs when the deadline timer fires: the lease ends at its
// maximum hold, or is lost for want of a renewal.
func (l *Lease) expire() {
	l.mu.Lock()
	now := time.Now()
	early := now.Before(l.deadline) // the timer raced with a renewal
	held := !l.holdEnd.IsZero() && !now.Before(l.holdEnd)
	l.mu.Unlock()
	switch {
	case early:
	case held:
		l.endHold()
	default:
		l.lose(&lostError{why: "no renewal succeeded before the local safety deadline"})
	}
}

// endHold ends a lease that reached its maximum hold: it is lost to its
// holder (its context ends first) and its row is deleted by token at once
// on a goroutine of the client's, so that a waiter need not wait out the
// TTL. A delete that fails leaves the row to expire: no renewal extends
// it any more.
func (l *Lease) endHold() {
	cause := &lostError{why: fmt.Sprintf("it reached its maximum hold of %s", l.maxHold), hold: true}
	if !l.end(cause) {
		return
	}
	l.c.cfg.Logger.WarnContext(l.ctx, "pglease: lease ended at its maximum hold", "name", l.name, "token", l.token, "max_hold", l.maxHold)
	l.reportEnd(Event{Kind: EventLost, Err: cause})
	if !l.c.life.goBackground(func() { _ = l.freeRow(context.Background()) }) && l.slot != nil {
		l.c.putSlot(l.name, l.slot, true) // closing: the row expires
	}
}

// end marks the lease ended with cause; only the first call wins.
func (l *Lease) end(cause error) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended, l.cause = true, cause
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	if hook := testHookEnding.Load(); hook != nil {
		(*hook)(l)
	}
	l.cancel(cause)
	l.c.reg.forget(l)
	return true
}

// announce reports the acquisition of a lease handed to the caller of the
// call that began at called, unless it has already ended (its end is then
// not reported either); EventAcquired is sent under l.mu, before any end.
// previous is the owner of the expired lease it took over, or "".
func (l *Lease) announce(ctx context.Context, called time.Time, previous string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	c := l.c
	l.announced, l.announcedAt = true, time.Now()
	c.events.send(Event{Kind: EventAcquired, Name: l.name, Owner: c.cfg.Owner, Token: l.token, Wait: l.announcedAt.Sub(called),
		Previous: previous, Context: ctx})
}

// reportEnd reports the end of a lease that has ended (e.Kind
// EventReleased or EventLost), if its acquisition was reported.
func (l *Lease) reportEnd(e Event) {
	l.mu.Lock()
	announced, at := l.announced, l.announcedAt
	l.mu.Unlock()
	if !announced {
		return
	}
	e.Name, e.Owner, e.Token, e.Hold = l.name, l.c.cfg.Owner, l.token, time.Since(at)
	l.c.events.send(e)
}

// lose ends a lease that was lost and frees its name locally.
func (l *Lease) lose(cause error) {
	if !l.end(cause) {
		return
	}
	l.c.cfg.Logger.WarnContext(l.ctx, "pglease: lease lost", "name", l.name, "token", l.token, "cause", cause)
	l.reportEnd(Event{Kind: EventLost, Err: cause})
	if l.slot != nil {
		l.c.putSlot(l.name, l.slot, true)
	}
}

// Release ends the lease and deletes its row (scoped by name and token), so
// that a waiter gets it at once; before the minimum hold time ([WithMinHold])
// the row is kept until then. The lease's context is cancelled before the
// row is deleted. Release is idempotent; it works on a detached, bounded
// context, so it may be called with a cancelled ctx. It returns an error
// only when the row could not be deleted (it then expires after its TTL).
func (l *Lease) Release(ctx context.Context) error {
	return l.release(ctx, ErrReleased)
}

func (l *Lease) release(ctx context.Context, cause error) error {
	if !l.end(cause) {
		return nil
	}
	return l.deleteRow(ctx)
}

// deleteRow deletes the row of a lease that has just ended (see release),
// reports the release, and then frees its local slot.
func (l *Lease) deleteRow(ctx context.Context) error {
	return l.removeRow(ctx, true)
}

// freeRow is deleteRow for a lease whose end was reported as a loss.
func (l *Lease) freeRow(ctx context.Context) error {
	return l.removeRow(ctx, false)
}

func (l *Lease) removeRow(ctx context.Context, report bool) error {
	if l.slot != nil {
		defer l.c.putSlot(l.name, l.slot, true)
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	c := l.c
	b := retryRelease.start()
	start := time.Now()
	for {
		err := c.releaseRow(ctx, l)
		if c.tableLost(ctx, err) {
			// The row went with the table: the lease is released all
			// the same, and nobody holds the name by it.
			err = nil
		}
		if err == nil {
			if report {
				l.reportEnd(Event{Kind: EventReleased, Latency: time.Since(start), Context: caller})
			}
			return nil
		}
		if !IsRetryable(err) || ctx.Err() != nil {
			err = opError(fmt.Sprintf("release %q (it will expire after its TTL)", l.name), err)
			// The lease has ended all the same.
			if report {
				l.reportEnd(Event{Kind: EventReleased, Latency: time.Since(start), Err: err, Context: caller})
			} else {
				c.cfg.Logger.WarnContext(caller, "pglease: could not delete the row of a lease that ended", "name", l.name, "err", err)
			}
			return err
		}
		select {
		case <-time.After(b.next()):
		case <-ctx.Done():
		}
	}
}

// releaseRow deletes the row by token (a session-bound lease too: its
// binding is its session's lock, which the session keeps).
func (c *Client) releaseRow(ctx context.Context, l *Lease) error {
	return c.release(ctx, l.name, l.token)
}

// Renew renews the lease now (a manual heartbeat; renewal also runs in the
// background). It returns an error matching [ErrLeaseLost] when the lease
// is no longer held.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.err(); err != nil {
		return err
	}
	lost, err := l.c.renew(ctx, []*Lease{l})
	if err != nil {
		return opError("renew", err)
	}
	if len(lost) > 0 {
		return l.err()
	}
	return nil
}

// Guard verifies, inside the caller's transaction tx, that the lease is
// still held with its token, and locks the lease row so that no takeover,
// release or cleanup can commit before tx ends. Call it before the writes
// the lease protects. When the lease is not held with its token, Guard
// returns an error matching [ErrNotHeld] and tx is aborted on the server:
// it cannot commit even if the error is ignored, so a stale holder's write
// never lands. A lease that the server reports as no longer held is also
// lost locally (its context ends with a cause matching [ErrLeaseLost]); a
// transient failure (network error, cancelled ctx) leaves the lease alone
// and returns the error. Keep guarded transactions
// shorter than the TTL: the lock also delays this lease's renewal. For the
// rest of tx, Guard lowers the server's
// idle_in_transaction_session_timeout to the time left until the lease's
// row could expire (its local deadline plus the safety margin; a stricter
// setting of the caller's is kept): a transaction whose client stops
// talking (a partition) then cannot hold the row lock, and block every
// takeover, past the moment a takeover could first happen; the server
// ends its session and it cannot commit.
func (l *Lease) Guard(ctx context.Context, tx pgx.Tx) error {
	return l.guard(ctx, store.Pgx(tx))
}

// GuardSQL is [Lease.Guard] for a database/sql transaction.
func (l *Lease) GuardSQL(ctx context.Context, tx *sql.Tx) error {
	return l.guard(ctx, store.SQL(tx, nil))
}

func (l *Lease) guard(ctx context.Context, q store.Querier) error {
	ended := l.err()
	if ended != nil {
		// Known to have ended: the statement is still sent, told to
		// fail, so that tx is aborted even if the caller ignores the
		// error. It runs even when ctx is done, briefly, for the same
		// reason.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), l.c.cfg.StatementTimeout)
		defer cancel()
	}
	// Until the row could expire on the server: the local deadline plus
	// the safety margin. No takeover could happen sooner anyway, and a
	// tighter bound would end slow but healthy transactions.
	err := l.c.st.Guard(ctx, q, l.name, l.token, ended == nil, time.Until(l.Deadline())+l.c.margin(l.ttl))
	switch {
	case ended != nil:
		return errorf("%w: %q token %d: %w", ErrNotHeld, l.name, l.token, ended)
	case l.c.tableLost(ctx, err):
		// The row went with the table: the lease is lost.
		l.lose(l.c.lostTableCause())
		return errorf("%w: %q token %d: %w", ErrNotHeld, l.name, l.token, l.err())
	case errors.Is(err, store.ErrNotHeld):
		// The server says the row is gone or has another token: the
		// lease is lost, whatever the renewals last saw.
		l.lose(&lostError{why: "a Guard found the lease no longer held with its token"})
		return errorf("%w: %q token %d: %w", ErrNotHeld, l.name, l.token, l.err())
	case err != nil:
		return opError("guard", err)
	}
	return nil
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
