package pglease

import (
	"context"
)

// An Elector tells the client's [Observer] about leadership, for adapters
// that export an is-leader gauge or the current leader:
//
//   - [EventElected] when a term begins (Owner is this client's, Token the
//     term's), followed at once by [EventLeaderChanged] naming this
//     instance if it was not the leader last reported;
//   - [EventDemoted] when the term ends, that is when the lead function has
//     returned (before the lease is released), with the term's Token and
//     as Err why it ended: nil after [Elector.Resign] or when lead returned
//     nil of its own accord, lead's error when it returned one while still
//     leading, else the cause that ended it (an error matching
//     [ErrLeaseLost] or [ErrClosed], or the cause of Run's context);
//   - [EventLeaderChanged] when the leader this elector sees changes, with
//     the leader's Owner and Token, or Owner "" and Token 0 when nobody
//     leads. While it leads, an elector sees itself. While it does not, it
//     reads the lease as [Elector.Observe] does (at once, on release
//     notifications, at the leader's expiry and at least every
//     [Config.PollInterval]), and only while [Elector.Run] campaigns; the
//     first reading of a campaign is reported too.
//
// The events of one client arrive in the order they happened, so an
// elector's Elected, Demoted and LeaderChanged events are in order. Without
// an Observer, Run reads nothing for them.

// electorEvents is what an elector last told the observer; guarded by the
// elector's mu.
type electorEvents struct {
	gen   uint64 // counts the starts and ends of terms: a reading begun before one is stale
	shown bool   // a leader was reported
	owner string // the leader last reported ("" for nobody)
	token int64
}

// elected reports the start of l's term; e.mu is held.
func (e *Elector) elected(l *Lease) {
	e.events.gen++
	e.send(Event{Kind: EventElected, Name: e.name, Owner: e.c.Owner(), Token: l.Token()})
	e.showLeader(e.c.Owner(), l.Token())
}

// demoted reports the end of l's term; e.mu is held. The leader last
// reported stays this instance until a reading shows another, or nobody.
func (e *Elector) demoted(l *Lease, why error) {
	e.events.gen++
	e.send(Event{Kind: EventDemoted, Name: e.name, Owner: e.c.Owner(), Token: l.Token(), Err: why})
}

// showLeader reports the leader if it differs from the one last reported;
// e.mu is held.
func (e *Elector) showLeader(owner string, token int64) {
	ev := &e.events
	if ev.shown && ev.owner == owner && ev.token == token {
		return
	}
	ev.shown, ev.owner, ev.token = true, owner, token
	e.send(Event{Kind: EventLeaderChanged, Name: e.name, Owner: owner, Token: token})
}

// send tells the client's observer, if it has one; e.mu is held, so that
// the elector's events join the client's queue in the order they happened.
func (e *Elector) send(ev Event) {
	if e.env.report != nil {
		e.env.report(ev)
	}
}

// sawLeader reports a reading of the leader begun at generation gen,
// unless a term began or ended since (the reading may predate it), or this
// instance leads or the reading names it (it knows better than a reading:
// a reading that names it outside a term saw a term that elected is about
// to report, or one that has just ended and whose row is being released).
func (e *Elector) sawLeader(gen uint64, info Info) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if gen != e.events.gen || e.term != nil || info.Owner == e.c.Owner() {
		return
	}
	e.showLeader(info.Owner, info.Token)
}

// watchLeaders starts reading the leader for [EventLeaderChanged] while
// Run campaigns, if the client has an observer, and returns the function
// that stops it and waits for it.
func (e *Elector) watchLeaders(ctx context.Context) (stop func()) {
	if e.env.report == nil {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	started := e.env.goBackground(func(context.Context) {
		defer close(done)
		var gen uint64 // the generation when the reading began
		read := func(ctx context.Context) (Info, error) {
			e.mu.Lock()
			gen = e.events.gen
			e.mu.Unlock()
			return e.leader(ctx)
		}
		e.watch(wctx, read, func(info Info) { e.sawLeader(gen, info) })
	})
	if !started {
		cancel()
		return func() {}
	}
	return func() {
		cancel()
		<-done
	}
}
