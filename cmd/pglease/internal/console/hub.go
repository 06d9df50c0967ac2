package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pglease/pglease"
	"github.com/pglease/pglease/cmd/pglease/internal/queue"
)

// hub reads the lease table and publishes snapshots to the subscribers
// (the event streams of the viewers). One goroutine (loop) does every read,
// so the database load does not depend on the number of viewers.
type hub struct {
	cfg       Config
	objs      objects
	pool      *pgxpool.Pool
	client    *pglease.Client // reads the rows
	listenCfg *pgx.ConnConfig

	kick      chan struct{} // a refresh is wanted (a notification, a release)
	ready     chan struct{} // closed after the first read
	refreshes atomic.Int64  // reads of the table

	mu         sync.Mutex
	cur        *snapshot
	subs       map[chan *snapshot]struct{}
	closed     bool                 // closeStreams was called
	done       chan struct{}        // closed by closeStreams
	listenerUp bool                 // under mu
	releasing  map[string]time.Time // names force-released here (until when to say so), for the feed
	lastOK     time.Time            // local time of the last successful read
	warnedMany bool                 // the per-lease metrics warning was logged
	seqReadErr error                // why the token sequence is not read, or nil
}

func newHub(cfg Config, objs objects, pool *pgxpool.Pool, client *pglease.Client, listenCfg *pgx.ConnConfig) *hub {
	return &hub{cfg: cfg, objs: objs, pool: pool, client: client, listenCfg: listenCfg,
		kick: make(chan struct{}, 1), ready: make(chan struct{}),
		cur: &snapshot{}, subs: map[chan *snapshot]struct{}{}, done: make(chan struct{}),
		releasing: map[string]time.Time{}}
}

// start runs the read loop and the listener until ctx ends.
func (h *hub) start(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(2)
	go func() { defer wg.Done(); h.loop(ctx) }()
	go func() { defer wg.Done(); h.listen(ctx) }()
}

// wake asks the loop for a refresh; it never blocks.
func (h *hub) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// minGap bounds how often notifications and timers make the hub read the
// table: a busy table (a release a millisecond) costs at most one read per
// minGap, and a change still shows within it.
const minGap = 50 * time.Millisecond

// loop is the hub's reader: it refreshes at once, then on a notification,
// when the token sequence moved, at the next expiry or staleness instant,
// and every FullRefresh whatever happened.
func (h *hub) loop(ctx context.Context) {
	poll := time.NewTicker(h.cfg.Poll)
	defer poll.Stop()
	full := time.NewTimer(h.cfg.FullRefresh)
	defer full.Stop()
	instant := time.NewTimer(time.Hour) // the next expiry or staleness
	defer instant.Stop()

	useSeq := true
	var lastSeq int64
	recheck := false // read once more at the next poll
	var last time.Time
	soon := time.NewTimer(time.Hour) // a deferred refresh (see minGap)
	soon.Stop()
	defer soon.Stop()
	deferred := false
	refresh := func() *snapshot {
		snap := h.refresh(ctx)
		last = time.Now()
		full.Reset(h.cfg.FullRefresh)
		if d, ok := nextInstant(snap, last); ok {
			instant.Reset(max(d, minGap))
		}
		return snap
	}
	if v, err := tokenSequence(ctx, h.pool, h.objs); err == nil {
		lastSeq = v
	} else if privilege(err) {
		useSeq = false
		h.noSequence(err)
	}
	refresh()
	close(h.ready)
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
			if wait := minGap - time.Since(last); wait > 0 {
				if !deferred {
					deferred = true
					soon.Reset(wait)
				}
				continue
			}
			refresh()
		case <-soon.C:
			deferred = false
			refresh()
		case <-full.C:
			refresh()
		case <-instant.C:
			refresh()
		case <-poll.C:
			if !useSeq {
				refresh()
				continue
			}
			if h.queuesMoved(ctx) {
				// A waiter queued or left: no token was drawn and
				// nothing was notified.
				refresh()
				continue
			}
			v, err := tokenSequence(ctx, h.pool, h.objs)
			switch {
			case privilege(err):
				useSeq = false
				h.noSequence(err)
				refresh()
			case err != nil:
				// The database is unreachable: the full refresh reports it.
			case v != lastSeq:
				lastSeq = v
				// nextval is seen before the acquisition commits: when the
				// read finds no row of the new token yet, read once more
				// at the next poll.
				recheck = maxToken(refresh()) < v
			case recheck:
				recheck = false
				refresh()
			}
		}
	}
}

// queuesMoved reads who waits while any lease is shown (nobody waits for
// a name without a row for long) and reports whether that changed since
// the current snapshot. A failed read reports no change: the full refresh
// reports the error.
func (h *hub) queuesMoved(ctx context.Context) bool {
	h.mu.Lock()
	cur := h.cur
	h.mu.Unlock()
	if len(cur.Leases) == 0 {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	queues, err := readQueues(rctx, h.client)
	if err != nil {
		return false
	}
	for _, l := range cur.Leases {
		if !sameQueue(l.Waiters, queues[queue.Of(l.Info)]) {
			return true
		}
	}
	return false
}

// noSequence logs, once, that acquisitions are detected by re-reading the
// table every Poll.
func (h *hub) noSequence(err error) {
	h.mu.Lock()
	first := h.seqReadErr == nil
	h.seqReadErr = err
	h.mu.Unlock()
	if first {
		h.cfg.Logger.Warn("cannot read the token sequence: re-reading the lease table every poll instead",
			"sequence", h.objs.seq, "poll", h.cfg.Poll, "error", h.cfg.Redact(err.Error()))
	}
}

// refresh reads the table, publishes the new snapshot when anything
// changed, and returns the current one.
func (h *hub) refresh(ctx context.Context) *snapshot {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	read, err := readTable(rctx, h.pool, h.client, h.objs)
	cancel()
	h.refreshes.Add(1)
	readAt := time.Now()

	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.cur
	next := *prev
	next.data = nil
	changed := false
	next.Status.ListenerUp = h.listenerUp
	next.Status.SequenceOK = h.seqReadErr == nil
	if err != nil {
		if ctx.Err() != nil {
			return prev
		}
		next.Status.DBUp = false
		next.Status.Error = h.cfg.Redact(err.Error())
		// A server that answered with an error is reachable: the page
		// and /healthz say what it refused, not that it is gone.
		var pe *pgconn.PgError
		if next.Status.Refused = errors.As(err, &pe); next.Status.Refused {
			next.Status.TableExists = read.Exists
		}
	} else {
		h.lastOK = readAt
		next.Status.DBUp, next.Status.Error, next.Status.Refused = true, "", false
		next.Status.TableExists = read.Exists
		next.Status.QueuesOK = !read.Exists || read.Queues != nil
		next.ServerNow, next.ReadAt = read.Now, readAt
		next.Leases = leasesOf(read.Leases, read.Queues, h.cfg.StaleAfter)
		var evs []event
		if !prev.ReadAt.IsZero() { // the first read changes nothing
			evs = diff(prev.Leases, next.Leases, prev.Status.TableExists, read.Exists, read.Now, h.releasedHere)
		}
		for _, e := range evs {
			h.cfg.Logger.Debug(e.Text, "event", e.Kind)
		}
		if len(evs) > 0 {
			feed := append(append([]event(nil), prev.Feed...), evs...)
			next.Feed = feed[max(0, len(feed)-feedLength):]
		}
		h.warnMany(len(next.Leases))
		changed = len(evs) > 0 || prev.ReadAt.IsZero() || !sameLeases(prev.Leases, next.Leases)
	}
	if changed || next.Status != prev.Status {
		next.Version = prev.Version + 1
		h.publish(&next)
	} else {
		h.cur = &next // the newest clock, for the page's offset
	}
	return h.cur
}

// publish makes s the current snapshot and hands it to every subscriber;
// one that has not taken the previous one gets this one instead. Called
// with mu held.
func (h *hub) publish(s *snapshot) {
	s.data = s.marshal(tableLabel(h.cfg.Table), h.cfg.Poll)
	h.cur = s
	for ch := range h.subs {
		select {
		case <-ch:
		default:
		}
		ch <- s
	}
}

// warnMany logs once that per-lease metrics cover over 1000 leases.
func (h *hub) warnMany(n int) {
	if h.cfg.MetricsPerLease && n > 1000 && !h.warnedMany {
		h.warnedMany = true
		h.cfg.Logger.Warn("--metrics-per-lease: over 1000 leases, each a set of time series in /metrics", "leases", n)
	}
}

// noteReleasing records, before a force-release from the console, that
// the feed should say so when name disappears; forgetReleasing undoes it
// when the force-release failed.
func (h *hub) noteReleasing(name string) {
	h.mu.Lock()
	h.releasing[name] = time.Now().Add(10 * time.Second)
	h.mu.Unlock()
}

func (h *hub) forgetReleasing(name string) {
	h.mu.Lock()
	delete(h.releasing, name)
	h.mu.Unlock()
}

// releasedHere reports (once) whether the console force-released name
// lately. Called with mu held.
func (h *hub) releasedHere(name string) bool {
	until, ok := h.releasing[name]
	delete(h.releasing, name)
	for n, u := range h.releasing {
		if time.Now().After(u) {
			delete(h.releasing, n)
		}
	}
	return ok && time.Now().Before(until)
}

// latest returns the current snapshot and the local time of the last
// successful read.
func (h *hub) latest() (*snapshot, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur, h.lastOK
}

// subscribe returns a channel that receives each new snapshot (the newest
// only, when the viewer is slow), and the current one; ok is false once
// the streams are closed.
func (h *hub) subscribe() (ch chan *snapshot, cur *snapshot, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, false
	}
	ch = make(chan *snapshot, 1)
	h.subs[ch] = struct{}{}
	return ch, h.cur, true
}

func (h *hub) unsubscribe(ch chan *snapshot) {
	h.mu.Lock()
	delete(h.subs, ch)
	h.mu.Unlock()
}

func (h *hub) viewers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// closeStreams ends every event stream (done) and refuses new ones.
func (h *hub) closeStreams() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

// setListener records the listener's state; a change is published by the
// refresh it asks for.
func (h *hub) setListener(up bool) {
	h.mu.Lock()
	changed := h.listenerUp != up
	h.listenerUp = up
	h.mu.Unlock()
	if changed {
		h.wake()
	}
}

// listen keeps a connection that LISTENs on the table's channel, and asks
// for a refresh on every notification and after every (re)connection (a
// notification may have been missed meanwhile). It reconnects with
// backoff.
func (h *hub) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := h.listenOnce(ctx)
		h.setListener(false)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		h.cfg.Logger.Warn("notification listener disconnected; reconnecting", "in", backoff, "error", h.cfg.Redact(err.Error()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenOnce connects, LISTENs and waits for notifications until the
// connection fails or ctx ends.
func (h *hub) listenOnce(ctx context.Context) error {
	// pgx bounds each host of the DSN by ConnectTimeout: a bound on the
	// whole attempt would let a silent first host use up the others' time.
	conn, err := pgx.ConnectConfig(ctx, h.listenCfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+quote(h.objs.channel)); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	h.setListener(true)
	h.wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil
			}
			return err
		}
		h.wake()
	}
}

// nextInstant returns how long after local time now the next held lease
// of s expires or turns stale; ok is false when none will.
func nextInstant(s *snapshot, now time.Time) (d time.Duration, ok bool) {
	if s.ReadAt.IsZero() {
		return 0, false
	}
	const after = 5 * time.Millisecond // be past the instant by the server's clock
	serverNow := s.serverNowAt(now)
	for _, l := range s.Leases {
		if l.State == stateExpired {
			continue
		}
		at := l.ExpiresAt
		if l.State == stateHeld {
			if stale := l.RenewedAt.Add(l.StaleAfter); stale.Before(at) {
				at = stale
			}
		}
		if dd := at.Sub(serverNow) + after; !ok || dd < d {
			d, ok = dd, true
		}
	}
	return d, ok
}

// maxToken is the largest token among the rows of s.
func maxToken(s *snapshot) int64 {
	var m int64
	for _, l := range s.Leases {
		m = max(m, l.Token)
	}
	return m
}
