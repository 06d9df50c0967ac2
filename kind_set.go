package pglease

// A set of names (AcquireAll, TryAcquireAll): every name, a plain lease's
// row, taken together by one statement, or none. A set does not queue; it
// takes the local slots of all its names, or none, for each attempt only,
// so that two goroutines of this client asking for overlapping sets (or a
// set and a single name) never wait for each other in a cycle; its
// refusal names every name not free. Its statement counts this client's
// own rows free (an acquisition's whose reply was lost: the caller holds
// every name's local slot) and takes them over (see nameReply.free).

import (
	"context"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// kindSet is a set of names.
type kindSet struct{}

func (kindSet) words(*leaseOptions) leaseKind { return plainKind }

func (kindSet) rows(name string, _ *leaseOptions) []string { return []string{name} }

// units: all the names at once, by one statement.
func (kindSet) units(rows []string) [][]string { return [][]string{rows} }

func (kindSet) queue() queueMode { return unqueued }

func (kindSet) keepsLocalSlot() bool { return true }

func (kindSet) describe(unit []string) string { return fmt.Sprintf("the set %q", unit) }

func (kindSet) logRetry(ctx context.Context, a *acquisition, err error, in time.Duration) {
	a.c.cfg.Logger.WarnContext(ctx, "pglease: acquire of a set failed; retrying", "names", a.names, "err", err, "in", in)
}

// localWait: a set's name may be held by another goroutine's attempt or
// wait, which notifies nothing when it ends, so a set looks again with
// backoff (reset once it takes its local slots: see acquisition.take), or
// at the deadline of the lease of this client that holds the name.
func (kindSet) localWait(a *acquisition, name string) time.Duration {
	if a.local == nil {
		a.local = retrySetLocal.start()
	}
	d := a.local.next()
	if l := a.c.reg.lease(name); l != nil {
		return time.Until(l.Deadline())
	}
	return d
}

// statement is AcquireAll's.
func (kindSet) statement(a *acquisition, unit []string) func(context.Context) reply {
	c, o := a.c, a.o
	args := store.AcquireAllArgs{Names: unit, Owner: c.cfg.Owner, TTL: o.ttl, MinHold: o.minHold, Metadata: o.metadata,
		Client: c.id, FairAfter: fairAfter}
	return func(sctx context.Context) (r reply) {
		r.sent = time.Now()
		var res store.AcquireAllResult
		r.err = c.exec(sctx, func(ctx context.Context, q store.DB, _ *sessState) (err error) {
			res, err = c.st.AcquireAll(ctx, q, args)
			return err
		})
		r.granted = res.Acquired
		r.rows = make([]nameReply, len(res.Names))
		for i, n := range res.Names {
			r.rows[i] = nameReply{name: n.Name, free: n.Free, acquireResult: acquireResult{AcquireResult: store.AcquireResult{
				Acquired: res.Acquired, Token: n.Token, OtherOwner: n.OtherOwner, OtherToken: n.OtherToken,
				OtherRemaining: n.OtherRemaining, OtherClient: n.OtherClient, OtherHeartbeatAge: n.OtherHeartbeatAge,
				Ahead: n.Ahead, Clash: n.Clash, HolderInSession: n.HolderInSession,
				HolderWatchable: n.HolderWatchable, HolderSession: n.HolderSession}}}
		}
		return r
	}
}

// refused reads the refusal of a set: the names not free, as
// *HeldErrors (the first one is reported, the others named in its
// message), and how long to wait: the longest remaining time of the
// holders (unknown, negative, when a holder could not be seen), as the set
// cannot be taken by expiry alone before then; a release of any name
// notifies sooner.
func (kindSet) refused(a *acquisition, rep reply, r *roundResult) {
	var first error
	var others []string
	var wait time.Duration
	for _, n := range rep.rows {
		if n.free && n.Ahead == 0 {
			continue
		}
		e := &HeldError{Holder: Info{Name: n.name}, Queued: int(n.Ahead)}
		remaining := n.OtherRemaining
		switch {
		case !n.free:
			e.Holder = Info{Name: n.name, Owner: n.OtherOwner, Token: n.OtherToken, Remaining: n.OtherRemaining,
				FastFailover: n.HolderInSession}
			if n.Ahead > 0 {
				remaining = max(remaining, a.c.cfg.PollInterval)
			}
			if n.HolderInSession && n.HolderWatchable {
				// Taken over once the holder's session ends: watch it.
				r.inSession = append(r.inSession, heldBy{n.name, n.HolderSession})
			}
		default:
			// Free but promised to the waiters ahead: the one woken takes
			// it, and its release notifies.
			remaining = a.c.cfg.PollInterval
		}
		if first == nil {
			first, wait = e, remaining
		} else {
			others = append(others, n.name)
		}
		if wait >= 0 && (remaining < 0 || remaining > wait) {
			wait = remaining
		}
	}
	if first == nil { // not reached: a refused set has a name not free
		first = ErrNotAcquired
	}
	held := first
	if len(others) > 0 {
		held = errorf("%w (also not free: %q)", first, others)
	}
	r.note(held, wait)
}
