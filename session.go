package pglease

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/store"
)

// session is the client's dedicated connection. One goroutine owns it: it
// runs queued operations (renewals first, then session-bound acquires and
// releases; acquisitions queued together run as one batch, a bounded one,
// with one commit) and, while idle, waits for notifications, which also
// makes it notice at once when the server ends the session. When the connection
// fails, every session-bound lease of that connection (its epoch) is lost
// immediately and the connection is re-opened with backoff.
//
// The client never closes this connection under a held session-bound lease
// on its own initiative: statements are bounded by the server's
// statement_timeout (an error that leaves the session intact), errors do not
// close it, and when a statement outlives its client-side bound as well (the
// server does not answer), every session-bound lease of the connection is
// ended locally before pgx closes the socket (sessionWatch).
type session struct {
	c    *Client
	mu   sync.Mutex
	ops  []*sessOp
	kick chan struct{}
	// stop interrupts what the idle session does: its wait for
	// notifications, or a watcher's statement (a cancel request).
	stop func()
	// The watch slot (see session.watch): slot is the watcher line that
	// holds it, watchReq its statement waiting to run.
	slot     *watchLine
	watchReq *sessWatch
	// epoch numbers connections, never reusing a number; 0 means not
	// connected. conns counts the connections made.
	epoch     uint64
	conns     uint64
	keepalive time.Duration // TTL the current connection's keepalive covers
	locked    bool          // the current connection holds its session lock
	// proxied: the connection's server backend is not its own (a
	// transaction-pooling proxy); it cannot hold session-bound leases.
	proxied bool
	// serving: the connection runs the client's statements (see
	// Client.exec): a pgx connection of its own, connected.
	serving bool
	// live: the connection holds the client lock, so this client's waits
	// queue (queueArgs), unless Config.DisableNotify; belled: it holds a
	// bell, bell (see Ring); ringing: a ring is queued (ringBell).
	live, belled bool
	bell         int
	ringing      bool
	// execs: the client's statements on the session now, queued or
	// running (see Client.exec).
	execs atomic.Int32
	// unannounced: names this client released waking nobody, for which a
	// ring is due unless it takes them again (ringUnlessRetaken).
	unannounced map[string]bool
	// listening: the connection listens for notifications, which it does
	// while the client holds a lease whose holder listens for step-down
	// requests, or listeners > 0 (waits and observers that need them), and
	// for listenLinger after.
	listening bool
	listeners int
	wanted    time.Time // when notifications were last needed
	// sock is the current connection's socket (nil for database/sql
	// connections and while disconnected), for Lease.SessionFile.
	sock    net.Conn
	lastErr error
	done    chan struct{}
}

type sessOp struct {
	timeout time.Duration
	urgent  bool // runs before queued non-urgent operations (renewals)
	fn      func(ctx context.Context, q store.Querier, s *sessState) error
	// acquire, when set, makes the operation a session-bound acquisition,
	// which the loop may run in one batch with the acquisitions queued
	// right behind it (fn runs it alone).
	acquire *sessAcquire
	res     chan error
}

// sessState is what an operation may read or change about the connection.
type sessState struct {
	epoch     uint64
	belled    bool // holds a bell, *bell (see Ring)
	bell      *int
	keepalive *time.Duration
	// locked: the connection holds its session lock (see bindable).
	locked  *bool
	proxied bool
	serving bool // the connection runs the client's statements (Client.exec)
}

// sessionWatch is the dedicated connection's context watcher. pgx closes a
// connection whose statement outlives its context, which frees the session
// advisory locks of every session-bound lease on it; so before the socket
// is cut, those leases are ended locally. An idle wait for notifications,
// interrupted to run an operation, does not close the connection.
type sessionWatch struct {
	conn    net.Conn
	overdue func()
}

func (w *sessionWatch) HandleCancel(ctx context.Context) {
	if errors.Is(context.Cause(ctx), errOverdue) {
		w.overdue()
	}
	_ = w.conn.SetDeadline(time.Now())
}

func (w *sessionWatch) HandleUnwatchAfterCancel() { _ = w.conn.SetDeadline(time.Time{}) }

// dconn is one dedicated connection: pgx (with notifications) or a pinned
// database/sql connection (without).
type dconn interface {
	querier() store.Querier
	// wait blocks until a notification arrives (its channel and payload)
	// or ctx ends or the connection fails.
	wait(ctx context.Context) (channel, payload string, err error)
	close()
	alive() bool
}

type pgxConn struct{ c *pgx.Conn }

func (p pgxConn) querier() store.Querier { return store.Pgx(p.c) }
func (p pgxConn) wait(ctx context.Context) (string, string, error) {
	n, err := p.c.WaitForNotification(ctx)
	if err != nil || n == nil {
		return "", "", err
	}
	return n.Channel, n.Payload, nil
}
func (p pgxConn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.c.Close(ctx)
}
func (p pgxConn) alive() bool { return !p.c.IsClosed() }

type sqlConn struct {
	c    *sql.Conn
	dead bool
}

func (s *sqlConn) querier() store.Querier { return store.SQL(s.c, nil) }
func (s *sqlConn) wait(ctx context.Context) (string, string, error) {
	<-ctx.Done()
	return "", "", ctx.Err()
}
func (s *sqlConn) close()      { _ = s.c.Close() }
func (s *sqlConn) alive() bool { return !s.dead }

// session returns the client's session, starting it on first use.
// Its loop starts through goBackground, under conn.mu with the client
// found open; should Close have begun to wait for the client's goroutines
// meanwhile, the session is left done, and its operations fail with
// ErrClosed.
func (c *Client) session() (*session, error) {
	c.conn.mu.Lock()
	defer c.conn.mu.Unlock()
	if c.life.isClosed() {
		return nil, ErrClosed
	}
	if s := c.conn.sess.Load(); s != nil {
		return s, nil
	}
	s := &session{c: c, kick: make(chan struct{}, 1), done: make(chan struct{})}
	c.conn.sess.Store(s)
	if !c.life.goBackground(s.loop) {
		close(s.done)
	}
	return s, nil
}

// do runs fn on the dedicated connection and waits for it. fn gets a
// context of its own bounded by timeout: cancelling a statement would close
// the connection and with it every session-bound lease. When ctx ends
// first, an operation still queued is dropped (do returns ctx.Err()), and
// one that runs is waited for: do returns only once fn has ended or surely
// never runs.
func (s *session) do(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, q store.Querier, st *sessState) error) error {
	return s.run(ctx, &sessOp{timeout: timeout, fn: fn, res: make(chan error, 1)})
}

// doFirst is do for an operation that must not wait behind others: renewals.
func (s *session) doFirst(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, q store.Querier, st *sessState) error) error {
	return s.run(ctx, &sessOp{timeout: timeout, urgent: true, fn: fn, res: make(chan error, 1)})
}

func (s *session) run(ctx context.Context, op *sessOp) error {
	s.mu.Lock()
	i := len(s.ops)
	for op.urgent && i > 0 && !s.ops[i-1].urgent {
		i--
	}
	s.ops = append(s.ops, nil)
	copy(s.ops[i+1:], s.ops[i:])
	s.ops[i] = op
	if s.stop != nil {
		s.stop()
	}
	s.mu.Unlock()
	wake(s.kick)
	select {
	case err := <-op.res:
		return err
	case <-s.done:
	case <-ctx.Done():
		// An operation still queued never runs; one that runs is waited
		// for (within its own bound), so that the caller knows it ended.
		s.mu.Lock()
		if i := slices.Index(s.ops, op); i >= 0 {
			s.ops = slices.Delete(s.ops, i, i+1)
			s.mu.Unlock()
			return ctx.Err()
		}
		s.mu.Unlock()
		select {
		case err := <-op.res:
			return err
		case <-s.done:
		}
	}
	select { // the loop answers every operation before it ends
	case err := <-op.res:
		return err
	default:
		return ErrClosed
	}
}

// errNotServing: the session stopped running the client's statements
// before it ran one; it runs on the pool instead (see Client.exec).
var errNotServing = errors.New("pglease: the dedicated session does not run statements now")

// exec runs fn, one of the client's statements, on its dedicated session
// when that runs them now (st is then the session's state), and otherwise
// on the pool (st nil). So a client's statements, its renewals and its
// waits share one connection (see "Connections" in the package
// documentation); the pool serves a client without such a session
// (database/sql with another driver, a transaction-pooling proxy), and
// its statements while the session connects or reconnects.
//
// On the session fn gets a context of its own, bounded by the server's
// statement_timeout and a second (see session.do): when ctx ends first, a
// statement still queued never runs (exec returns ctx.Err()), and one that
// runs is waited for, as a pool's statement is cancelled and waited for:
// exec returns only once its statement ended. A lock wait on the
// session ends after its lock_timeout (sessionLockTimeout), so that the
// session does not sit behind a row lock (a guarded transaction) while
// renewals wait.
//
// A statement that comes while execsOnSession others of the client's
// statements are on the session, queued or running, runs on the pool
// instead: one connection runs one statement at a time, each waiting for
// its own WAL flush, so that the goroutines of a busy client would queue
// behind one another (see docs/BENCHMARKS.md, CAP: 16 goroutines acquiring
// 10,000 leases on distinct names). The pool's connections close once
// idle (poolIdleTime), and an idle or waiting client keeps its one
// connection: a wait's attempt and its watcher's look at the holder's bell
// may meet on the session, and do not open a connection for that.
func (c *Client) exec(ctx context.Context, fn func(ctx context.Context, q store.DB, st *sessState) error) error {
	if s := c.conn.sess.Load(); s != nil && s.servesNow() {
		if s.execs.Add(1) > execsOnSession { // the session is backlogged
			s.execs.Add(-1)
			return fn(ctx, c.db, nil)
		}
		err := s.do(ctx, c.cfg.StatementTimeout+time.Second, func(sctx context.Context, q store.Querier, st *sessState) error {
			db, ok := q.(store.DB) // a pgx connection's is
			if !st.serving || !ok {
				return errNotServing
			}
			return fn(sctx, db, st)
		})
		s.execs.Add(-1)
		// Close stops the session (ErrClosed), and cuts the statement it
		// runs then: that one ran or not, and may run again (every
		// statement of the client is idempotent by token).
		closing := err != nil && c.life.bg.Err() != nil && !store.FromServer(err)
		if !errors.Is(err, errNotServing) && !errors.Is(err, ErrClosed) && !closing {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fn(ctx, c.db, nil)
}

// idleLinger is how long after an operation the session waits for the
// next one without reading its connection. An idle session otherwise
// reads it, to hear notifications and its own end at once, and an
// operation interrupts that read: a context's cancel, a deadline set on
// the socket and the reader woken by the poller, a handful of thread
// wake-ups (what the client adds to its store call: 1.28 with them, 1.24
// without, BenchmarkClientOverStore). A client's statements come in runs
// (an acquisition and its release, a burst), so the session looks for the
// next one first. A notification or the connection's end that comes
// meanwhile is read idleLinger later at most.
const idleLinger = 2 * time.Millisecond

// execsOnSession is how many of the client's statements the session takes
// at once, queued or running, before the next runs on the pool (see
// Client.exec).
const execsOnSession = 2

// servesNow reports whether the session runs the client's statements now.
func (s *session) servesNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving
}

// isLive reports whether the current connection lets this client's waits
// queue (see session.live).
func (s *session) isLive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}

// comingUp reports whether the session is connecting for the first time
// and no attempt of it has failed yet: a wait then queues once it is up
// (the connection wakes every wait), and registers no polling waiter
// meanwhile (see queueArgs).
func (s *session) comingUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns == 0 && s.lastErr == nil
}

func (s *session) currentEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

func (s *session) loop() {
	defer close(s.done)
	c := s.c
	var conn dconn
	backoff := reconnectSession.start()
	// lastOp: when the loop last ran an operation (zero once it lingered
	// idleLinger after it); linger times that wait.
	var lastOp time.Time
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer func() {
		if conn != nil {
			conn.close()
		}
		s.failOps(ErrClosed)
	}()
	for c.life.bg.Err() == nil {
		if conn == nil {
			var err error
			var proxied bool
			var live bool
			conn, proxied, live, err = s.connect()
			if err != nil {
				s.mu.Lock()
				s.lastErr = err
				s.mu.Unlock()
				c.cfg.Logger.WarnContext(c.life.bg, "pglease: dedicated connection failed; retrying", "err", err)
				s.failOps(err)
				select {
				case <-time.After(backoff.next()):
				case <-c.life.bg.Done():
				}
				continue
			}
			backoff.reset()
			s.mu.Lock()
			s.conns++
			s.epoch = s.conns
			s.keepalive, s.locked = 0, false
			s.proxied = proxied
			_, isPgx := conn.(pgxConn)
			s.serving = isPgx && !proxied
			s.live, s.belled, s.bell, s.listening = live && !c.cfg.DisableNotify, live, 0, false
			s.sock = nil
			if pc, ok := conn.(pgxConn); ok {
				s.sock = pc.c.PgConn().Conn()
			}
			s.lastErr = nil
			serving := s.serving
			s.mu.Unlock()
			if serving {
				c.conn.dropPoolConns()
			}
			c.wake.hub.notifyAll() // notifications may have been missed while down
		}
		stepDowns := c.reg.hearsStepDowns()
		s.mu.Lock()
		var op *sessOp
		if len(s.ops) > 0 {
			op = s.ops[0]
			s.ops = s.ops[1:]
		}
		if pc, ok := conn.(pgxConn); ok && op != nil && op.acquire != nil && !s.proxied {
			if batch := s.takeBatch(op, c.batchLimit()); len(batch) > 1 {
				st := &sessState{epoch: s.epoch, keepalive: &s.keepalive, locked: &s.locked, belled: s.belled, bell: &s.bell}
				s.mu.Unlock()
				conn = s.runBatch(pc, st, batch)
				lastOp = time.Now()
				continue
			}
		}
		if op == nil && s.watchReq != nil {
			w := s.watchReq
			s.watchReq = nil
			change, _ := s.listenChange(stepDowns)
			if change > 0 || s.listening && (stepDowns || s.listeners > 0) || !s.serving {
				s.mu.Unlock()
				w.res <- errNoSlot
				continue
			}
			if s.listening {
				// It listens only as it lingers: a watch on the session
				// is worth more than the connection it would take.
				s.mu.Unlock()
				if err := s.listen(conn, false); err != nil {
					w.res <- errNoSlot
					if !conn.alive() {
						conn = s.lost(conn, err)
					}
					continue
				}
				s.mu.Lock()
				if len(s.ops) > 0 || s.listeners > 0 {
					s.watchReq = w // an operation first, or listen again
					s.mu.Unlock()
					continue
				}
			}
			conn = s.runWatch(conn.(pgxConn), w) // unlocks s.mu
			continue
		}
		if op == nil && !s.listening && s.listeners == 0 && !stepDowns && !lastOp.IsZero() {
			if left := idleLinger - time.Since(lastOp); left > 0 {
				// Just after a statement: the client's next is likely near
				// (a release after an acquisition, a burst), so the loop
				// waits for it without reading the connection, which the
				// statement would have to interrupt (see idleLinger).
				s.mu.Unlock()
				linger.Reset(left)
				select {
				case <-s.kick:
				case <-linger.C:
					lastOp = time.Time{}
				case <-c.life.bg.Done():
				}
				continue
			}
		}
		var wctx context.Context
		var change int
		if op == nil {
			var cancel context.CancelFunc
			var linger time.Duration
			change, linger = s.listenChange(stepDowns)
			if linger > 0 {
				wctx, cancel = context.WithTimeout(c.life.bg, linger)
			} else {
				wctx, cancel = context.WithCancel(c.life.bg)
			}
			s.stop = cancel
		}
		st := &sessState{epoch: s.epoch, keepalive: &s.keepalive, locked: &s.locked, proxied: s.proxied, serving: s.serving, belled: s.belled, bell: &s.bell}
		s.mu.Unlock()

		if op != nil {
			ctx, cancel := context.WithTimeoutCause(c.life.bg, op.timeout, errOverdue)
			err := op.fn(ctx, conn.querier(), st)
			cancel()
			if sc, ok := conn.(*sqlConn); ok && err != nil && store.Retryable(err) {
				sc.dead = true // database/sql: no session-bound leases here
			}
			if err != nil && !conn.alive() {
				conn = s.lost(conn, err)
			}
			op.res <- err
			lastOp = time.Now()
			continue
		}
		if change != 0 {
			if err := s.listen(conn, change > 0); err != nil {
				s.mu.Lock()
				s.stop()
				s.stop = nil
				s.mu.Unlock()
				if !conn.alive() {
					conn = s.lost(conn, err)
				} else {
					c.cfg.Logger.WarnContext(c.life.bg, "pglease: could not change what the dedicated connection listens for; trying again", "err", err)
					select {
					case <-time.After(backoff.next()):
					case <-c.life.bg.Done():
					}
				}
				continue
			}
		}
		channel, payload, err := conn.wait(wctx)
		s.mu.Lock()
		s.stop()
		s.stop = nil
		s.mu.Unlock()
		switch {
		case err == nil && channel == c.stepDownChannel():
			c.stepDownNotified(payload)
		case err == nil:
			c.wake.hub.notify(payload, channel != c.st.Names.Channel)
		case wctx.Err() != nil && conn.alive():
			// interrupted for an operation or by Close
		default:
			conn = s.lost(conn, err)
		}
	}
}

// sessWatch is a watcher's blocking statement queued on the session.
type sessWatch struct {
	fn    func(ctx context.Context, conn *pgx.Conn) error
	bound time.Duration // its client-side bound (the server's is shorter)
	res   chan error
}

var (
	// errNoSlot: the session does not run a watcher's statement now (another
	// watcher holds its slot, it listens for notifications, or it does not
	// run the client's statements); the watcher uses a connection of its own.
	errNoSlot = errors.New("pglease: the dedicated session's watch slot is not free")
	// errInterrupted: a watcher's statement on the session was cancelled so
	// that the session could run an operation, or listen; the watcher waits
	// again.
	errInterrupted = errors.New("pglease: a watcher's wait on the dedicated session was interrupted")
)

// needsNotifications reports whether the client needs notifications for
// more than own (0 or 1) of its waits: for other waits or observers, or
// for leases whose holders hear step-down requests.
func (s *session) needsNotifications(own int) bool {
	if s.c.reg.hearsStepDowns() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listeners > own
}

// watch runs fn, a watcher's blocking statement, on the session while it
// is idle, for line l, which then holds the session's watch slot until it
// lets go of it (unslot): so a waiting client watches one holder's bell,
// or one holder's session, on its one connection. It fails with errNoSlot
// when another line holds the slot, or the session does not run the
// client's statements now, or needs to listen for notifications (which the
// server delivers only between statements); a session that listens only
// as it lingers (listenLinger) stops listening for the watch. While fn runs, the session's other
// work (an operation queued, a need to listen) interrupts it with a cancel
// request (runWatch): watch then fails with errInterrupted.
func (s *session) watch(ctx context.Context, l *watchLine, bound time.Duration, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	s.mu.Lock()
	if s.slot != nil && s.slot != l || !s.serving || s.listeners > 0 || s.c.cfg.DisableNotify {
		s.mu.Unlock()
		return errNoSlot
	}
	s.slot = l
	w := &sessWatch{fn: fn, bound: bound, res: make(chan error, 1)}
	s.watchReq = w
	if s.stop != nil {
		s.stop()
	}
	s.mu.Unlock()
	wake(s.kick)
	select {
	case err := <-w.res:
		return err
	case <-ctx.Done():
		s.mu.Lock()
		if s.watchReq == w {
			s.watchReq = nil
		} else if s.stop != nil {
			s.stop() // it may run now: interrupt it
		}
		s.mu.Unlock()
		return ctx.Err()
	case <-s.done:
		return errNoSlot
	}
}

// slotFree reports whether a line would have the watch slot now (see
// watch).
func (s *session) slotFree() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slot == nil && s.serving && s.listeners == 0 && !s.c.cfg.DisableNotify
}

// unslot lets go of the watch slot, if l holds it.
func (s *session) unslot(l *watchLine) {
	s.mu.Lock()
	if s.slot == l {
		s.slot = nil
	}
	s.mu.Unlock()
}

// runWatch runs a watcher's statement (s.mu held, and unlocked here). What
// interrupts an idle session (s.stop) sends a cancel request meanwhile; the
// statement then fails (query_canceled), and errInterrupted is answered.
// The next statement on the connection is sent only once the cancel request
// was delivered, so it cannot hit that one: a cancel that reaches the
// backend between statements is dropped by the server. It returns the
// connection, or nil when it failed.
func (s *session) runWatch(conn pgxConn, w *sessWatch) dconn {
	c := s.c
	var fired atomic.Bool
	finished := make(chan struct{}) // the statement returned
	delivered := make(chan struct{})
	s.stop = func() {
		if fired.CompareAndSwap(false, true) {
			go func() {
				defer close(delivered)
				s.interrupt(conn, finished)
			}()
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeoutCause(c.life.bg, w.bound, errOverdue)
	err := w.fn(ctx, conn.c)
	cancel()
	close(finished)
	s.mu.Lock()
	s.stop = nil
	s.mu.Unlock()
	if fired.Load() {
		<-delivered
		if store.Classify(err) == store.KindCanceled {
			err = errInterrupted
		}
	}
	var dc dconn = conn
	if err != nil && !conn.alive() {
		dc = s.lost(conn, err)
	}
	w.res <- err
	return dc
}

// interrupt sends cancel requests for the watcher's statement running on
// conn until it has returned (finished). The server drops a cancel that
// reaches the backend between statements: one sent before the statement
// began, or between the two statements of its batch; so one is sent again
// after a moment, then less often, while the statement runs.
func (s *session) interrupt(conn pgxConn, finished <-chan struct{}) {
	b := interruptAgain.start()
	for {
		if hook := testHookInterrupt.Load(); hook != nil {
			(*hook)(s.c.id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.c.connectTimeout())
		_ = conn.c.PgConn().CancelRequest(ctx)
		cancel()
		select {
		case <-finished:
			return
		case <-time.After(b.next()):
		}
	}
}

// testHookInterrupt, when set by a test, runs before each cancel request
// that interrupts a watcher's statement, with the client's id.
var testHookInterrupt atomic.Pointer[func(client string)]

// takeBatch returns op, an acquisition just taken from the queue, with the
// acquisitions of other names queued right behind it, at most limit in
// all, and removes them from the queue; the first operation of another
// kind ends the batch, so that operations keep their order. An acquisition
// whose batch failed runs alone. s.mu is held.
func (s *session) takeBatch(op *sessOp, limit int) []*sessOp {
	if op.acquire.alone {
		return nil
	}
	batch := []*sessOp{op}
	names := map[string]bool{op.acquire.args.Name: true}
	for len(batch) < limit && len(s.ops) > 0 {
		next := s.ops[0]
		if next.acquire == nil || next.acquire.alone || names[next.acquire.args.Name] {
			break
		}
		names[next.acquire.args.Name] = true
		batch = append(batch, next)
		s.ops = s.ops[1:]
	}
	return batch
}

// runBatch runs a batch of acquisitions (see acquireBatch) under the bound
// of one operation and answers each. When the batch fails and the
// connection is intact, its acquisitions go back to the head of the queue
// (behind urgent operations) to run one by one, each with its own result.
// It returns the connection, or nil when it failed.
func (s *session) runBatch(conn pgxConn, st *sessState, batch []*sessOp) dconn {
	ctx, cancel := context.WithTimeoutCause(s.c.life.bg, batch[0].timeout, errOverdue)
	err := s.c.acquireBatch(ctx, conn.c, st, batch)
	cancel()
	if hook := testHookBatch.Load(); hook != nil {
		(*hook)(len(batch), err)
	}
	var dc dconn = conn
	alone := err != nil
	if err != nil && !conn.alive() {
		dc = s.lost(conn, err)
		alone = false
	}
	switch {
	case err == nil:
		for _, op := range batch {
			op.res <- nil
		}
	case alone:
		s.mu.Lock()
		i := 0
		for i < len(s.ops) && s.ops[i].urgent {
			i++
		}
		for _, op := range batch {
			op.acquire.alone = true
		}
		s.ops = slices.Insert(s.ops, i, batch...)
		s.mu.Unlock()
	default:
		for _, op := range batch {
			op.res <- err
		}
	}
	return dc
}

// testHookBatch, when set by a test, runs after each batch of
// acquisitions with its size and error.
var testHookBatch atomic.Pointer[func(size int, err error)]

// lost handles a failed connection: it ends every session-bound lease of
// its epoch, then closes the connection, and returns nil so that the loop
// reconnects.
func (s *session) lost(conn dconn, err error) dconn {
	s.mu.Lock()
	epoch := s.epoch
	s.epoch = 0
	s.serving, s.live, s.belled, s.listening = false, false, false, false
	s.sock = nil
	s.mu.Unlock()
	s.c.sessionLost(epoch, err)
	conn.close()
	if s.c.life.bg.Err() == nil {
		s.c.cfg.Logger.WarnContext(s.c.life.bg, "pglease: dedicated connection lost; reconnecting", "err", err)
	}
	s.c.wake.hub.notifyAll()
	return nil
}

// overdue ends the session-bound leases of the current connection: a
// statement outlived its bound and pgx is about to close the connection.
func (s *session) overdue() {
	s.c.sessionLost(s.currentEpoch(), errOverdue)
}

func (s *session) failOps(err error) {
	s.mu.Lock()
	ops := s.ops
	s.ops = nil
	s.mu.Unlock()
	for _, op := range ops {
		op.res <- err
	}
}
