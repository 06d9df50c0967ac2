package pglease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// countAttempts counts the acquisition statements of every client until
// the test ends.
func countAttempts(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	hook := func(string, string) { n.Add(1) }
	testHookAttempt.Store(&hook)
	t.Cleanup(func() { testHookAttempt.Store(nil) })
	return &n
}

// countAttemptsOf counts the acquisition statements of client c alone
// until the test ends.
func countAttemptsOf(t *testing.T, c *Client) *atomic.Int64 {
	var n atomic.Int64
	hook := func(client, _ string) {
		if client == c.id {
			n.Add(1)
		}
	}
	testHookAttempt.Store(&hook)
	t.Cleanup(func() { testHookAttempt.Store(nil) })
	return &n
}

// queued reports how many clients are registered in the queue of name.
func queued(t testing.TB, c *Client, name string) int {
	return pgtest.Value[int](t, `SELECT count(*) FROM `+c.st.Names.QualifiedWaiters()+` WHERE "name" = $1`, name)
}

// waitQueued waits until client w is registered in the queue of name.
func waitQueued(t testing.TB, c, w *Client, name string) {
	t.Helper()
	pgtest.WaitFor(t, patience, fmt.Sprintf("client %s to queue for %q", w.id, name), func() bool {
		return pgtest.Value[bool](t, `SELECT EXISTS (SELECT 1 FROM `+c.st.Names.QualifiedWaiters()+` WHERE "name" = $1 AND "client" = $2)`, name, w.id)
	})
}

// queueUp starts a wait of each client of ws on name (with opts), one after
// another, each once the one before it is queued in the queue of holder's
// table and settled(it) holds (when set); each releases at once what it
// gets. The function returned waits for them all, and returns the indexes
// in ws of the clients in the order they acquired.
func queueUp(t *testing.T, holder *Client, ws []*Client, name string, settled func(*Client) bool, opts ...Option) func() []int {
	t.Helper()
	ctx := testCtx(t)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			l, err := w.Acquire(ctx, name, opts...)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		waitQueued(t, holder, w, name)
		if settled != nil {
			pgtest.WaitFor(t, patience, fmt.Sprintf("waiter %d to settle", i), func() bool { return settled(w) })
		}
	}
	return func() []int {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return order
	}
}

// inOrder fails the test unless order is 0, 1, 2, ….
func inOrder(t *testing.T, order []int) {
	t.Helper()
	for i, w := range order {
		if i != w {
			t.Fatalf("clients acquired in the order %v, want the order they queued in", order)
		}
	}
}

// A release wakes the first queued client alone: handing a lease down a
// queue of n waiting clients costs n acquisition statements, not the
// n(n+1)/2 of waking every waiter at every release, and the clients get
// it in the order they queued.
func TestReleaseWakesOnlyTheFirstQueuedClient(t *testing.T) {
	ctx := testCtx(t)
	cfg := Config{PollInterval: time.Minute}
	holder := testClient(t, cfg)
	cfg.Table = holder.cfg.Table
	l, err := holder.TryAcquire(ctx, "queue")
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	ws := make([]*Client, n)
	for i := range ws {
		ws[i] = testClient(t, cfg)
	}
	order := queueUp(t, holder, ws, "queue", nil)
	attempts := countAttempts(t)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	inOrder(t, order())
	if got := attempts.Load(); got > n+2 {
		t.Errorf("handing the lease down %d queued clients took %d acquisition statements, want about %d (one per hand-off)", n, got, n)
	}
	if q := queued(t, holder, "queue"); q != 0 {
		t.Errorf("%d registrations left in the queue", q)
	}
}

// A waiter whose client has died (its dedicated session, which holds the
// client lock, is gone) is passed over at once, however early it queued.
func TestDeadWaiterIsPassedOver(t *testing.T) {
	ctx := testCtx(t)
	holder := testClient(t, Config{PollInterval: time.Minute})
	waiter := testClient(t, Config{Table: holder.cfg.Table, PollInterval: time.Minute})
	l, err := holder.TryAcquire(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	// A registration from long ago, fresh, of a client with no session.
	pgtest.Exec(t, `INSERT INTO `+holder.st.Names.QualifiedWaiters()+` VALUES ($1, 'feedfacefeedface', now() - interval '1 hour', now() + interval '1 hour')`, "dead")
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, "dead")
		if err == nil {
			err = wl.Release(ctx)
		}
		got <- err
	}()
	waitQueued(t, holder, waiter, "dead")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, got, "the live waiter's acquisition"); err != nil {
		t.Fatal(err)
	}
}

// A live waiter that is woken but never acquires (a client paused or
// crashed right after the release; simulated by a session that holds a
// client lock and listens) holds up the others only until its registration
// goes stale (made so here at once); then their fallback poll takes the
// lease.
func TestWokenWaiterThatNeverComesIsCoveredByThePoll(t *testing.T) {
	ctx := testCtx(t)
	holder := testClient(t, Config{})
	waiter := testClient(t, Config{Table: holder.cfg.Table, PollInterval: 200 * time.Millisecond})
	l, err := holder.TryAcquire(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := holder.st.LockNamespace()
	if err != nil {
		t.Fatal(err)
	}
	const ghost = "0123456789abcdef"
	conn := pgtest.Conn(t)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1::text || $2::text, 1))`, ns, ghost); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{"pglease_" + ghost}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, `INSERT INTO `+holder.st.Names.QualifiedWaiters()+` VALUES ($1, $2, now() - interval '1 hour', now() + interval '1 hour')`, "stuck", ghost)
	// The ghost has waited through the whole hold (longer than fairAfter),
	// so its turn began long ago: the lease is promised to it on release.
	pgtest.Exec(t, `UPDATE `+holder.st.Names.QualifiedTable()+` SET acquired_at = now() - interval '1 hour' WHERE name = 'stuck'`)
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "stuck")
		got <- err
	}()
	waitQueued(t, holder, waiter, "stuck")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	n, err := conn.WaitForNotification(nctx)
	if err != nil {
		t.Fatalf("the first waiter was not woken: %v", err)
	}
	if n.Payload != "stuck" {
		t.Fatalf("notification %q, want the lease's name", n.Payload)
	}
	// The free lease is promised to the first waiter: a TryAcquire of
	// another client is refused, and says why.
	var held *HeldError
	if _, err := holder.TryAcquire(ctx, "stuck"); !errors.As(err, &held) || held.Queued == 0 || !strings.Contains(err.Error(), "queued ahead") {
		t.Fatalf("TryAcquire of a lease promised to a waiter: %v, want a HeldError naming the queue", err)
	}
	// ... and wakes the waiter the lease is promised to.
	if n, err := conn.WaitForNotification(nctx); err != nil || n.Payload != "stuck" {
		t.Fatalf("a refused attempt on a promised lease did not wake the first waiter: %v, %v", n, err)
	}
	// The first waiter never comes: its registration goes stale.
	pgtest.Exec(t, `UPDATE `+holder.st.Names.QualifiedWaiters()+` SET expires_at = clock_timestamp() WHERE client = $1`, ghost)
	if err := pgtest.Receive(t, got, "the second waiter's acquisition once the first's registration went stale"); err != nil {
		t.Fatal(err)
	}
	if pgtest.Value[bool](t, `SELECT l.acquired_at < w.expires_at FROM `+holder.st.Names.QualifiedTable()+` AS l, `+
		holder.st.Names.QualifiedWaiters()+` AS w WHERE l.name = 'stuck' AND w.client = $1`, ghost) {
		t.Fatal("the second waiter took the lease promised to the first while the first's registration was fresh")
	}
}

// waitingFor starts waiter's Acquire of name and returns the channel of
// its outcome (the lease is released at once).
func waitingFor(ctx context.Context, waiter *Client, name string) <-chan error {
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, name)
		if err == nil {
			err = wl.Release(ctx)
		}
		got <- err
	}()
	return got
}

// slowPair returns a holder and a waiter on one fresh table whose timers
// and polls (PollInterval 10 minutes) come far too late for a test, the
// waiter's dedicated session already up and listening: its start wakes
// every wait, which would add an attempt.
func slowPair(t *testing.T) (holder, waiter *Client) {
	t.Helper()
	cfg := Config{PollInterval: 10 * time.Minute}
	holder = testClient(t, cfg)
	cfg.Table = holder.cfg.Table
	waiter = testClient(t, cfg)
	sess, err := waiter.session()
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the waiter's dedicated session", sess.isLive)
	// The waiter listens for notifications throughout (as a client that
	// holds leases or observes does), so that its waits do not watch the
	// holder's doorbell, whose arming would add an attempt.
	t.Cleanup(waiter.needNotifications())
	pgtest.WaitFor(t, patience, "the waiter's session to listen", sess.isListening)
	return holder, waiter
}

// holdAttempt holds c's n-th acquisition attempt from now back until
// proceed is called (or the test ends): reached is closed when that
// attempt is about to run; attempts counts c's attempts.
func holdAttempt(t *testing.T, c *Client, n int32) (attempts *atomic.Int32, reached <-chan struct{}, proceed func()) {
	attempts = new(atomic.Int32)
	at, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	proceed = func() { once.Do(func() { close(release) }) }
	hook := func(client, name string) {
		if client == c.id && attempts.Add(1) == n {
			close(at)
			<-release
		}
	}
	testHookAttempt.Store(&hook)
	t.Cleanup(func() { proceed(); testHookAttempt.Store(nil) })
	return attempts, at, proceed
}

// A waiter woken in vain (the holder took the name again first) is not
// woken by the releases that follow until the lease is promised to it; it
// looks again by itself once its promise holds. Here no release wakes it
// at all (its turn is made to begin in the future); the lease is released
// while that look waits to start, and the look takes it, long before the
// waiter's timer (TTL and PollInterval: 10 minutes).
func TestWaiterWokenInVainLooksAgainWhenItsPromiseHolds(t *testing.T) {
	// Its attempts: 1 registers, 2 is the look after registering, 3 is
	// the woken one (in vain: the lease is held), 4 the look once its
	// promise would hold.
	wokenInVain(t, "vain", 4, func(*Client, *atomic.Int32) {})
}

// The look of a waiter woken in vain is timed from its latest wake-up,
// not its first: the listener's start wakes every wait once, long before
// any release, and a waiter timed from that wake-up would sleep until its
// timer. Here the first wake-up is the listener's, the second a release's
// (in vain) well after it.
func TestWaiterWokenInVainLooksAgainFromItsLatestWakeUp(t *testing.T) {
	// Its attempts: 1 registers, 2 is the look after registering, 3 the
	// one woken by the listener's start (in vain: the lease is held), 4
	// its look once that wake-up's promise would hold (in vain too), 5
	// the one woken by a release (in vain), 6 the look once that
	// promise would hold.
	wokenInVain(t, "vain-twice", 6, func(waiter *Client, attempts *atomic.Int32) {
		waiter.wake.hub.notifyAll()
		pgtest.WaitFor(t, patience, "the look after the listener's wake-up", func() bool { return attempts.Load() >= 4 })
	})
}

// wokenInVain makes a waiter for name, held by another client for 10
// minutes (TTL and PollInterval), register; runs before; then wakes it in
// vain as a release would, its turn made to begin in the future so that
// no release wakes it again; holds back its attempt number look, its own
// look once its promise would hold, until the lease is released; and
// checks that this look takes the lease, long before the waiter's timer.
func wokenInVain(t *testing.T, name string, look int32, before func(waiter *Client, attempts *atomic.Int32)) {
	t.Helper()
	ctx := testCtx(t)
	holder, waiter := slowPair(t)
	l, err := holder.TryAcquire(ctx, name, WithTTL(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	attempts, looked, proceed := holdAttempt(t, waiter, look)
	got := waitingFor(ctx, waiter, name)
	pgtest.WaitFor(t, patience, "the waiter's look after registering", func() bool { return attempts.Load() >= 2 })
	before(waiter, attempts)
	pgtest.Exec(t, `UPDATE `+holder.st.Names.QualifiedWaiters()+` SET notified_at = clock_timestamp() + interval '1 hour' WHERE client = $1`, waiter.id)
	pgtest.Exec(t, `SELECT pg_notify($1, $2)`, store.ClientChannel(waiter.id), name)
	pgtest.Receive(t, looked, "the woken waiter's own look once its promise would hold")
	err = l.Release(ctx)
	proceed()
	if err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, got, "the acquisition by that look"); err != nil {
		t.Fatal(err)
	}
}

// lookAgain times the look of a queued waiter refused after a wake-up
// from that latest wake-up; a waiter behind others, or never woken, keeps
// its delay.
func TestLookAgainIsTimedFromTheLatestWakeUp(t *testing.T) {
	t0 := time.Now()
	long := 10 * time.Minute
	w := &waker{queued: true}
	if got := w.lookAgain(long, t0, false, false); got != long {
		t.Errorf("never woken: delay %v, want %v", got, long)
	}
	w.woke(t0)
	w.woke(t0.Add(time.Second))
	now := t0.Add(time.Second + time.Millisecond)
	want := fairAfter + store.WakeEvery - time.Millisecond
	if got := w.lookAgain(long, now, false, false); got != want {
		t.Errorf("woken at 0 and 1s, refused at 1.001s: delay %v, want %v", got, want)
	}
	if got := w.lookAgain(long, now, true, false); got != long {
		t.Errorf("behind others: delay %v, want %v", got, long)
	}
	if got := w.lookAgain(long, now.Add(time.Second), false, false); got != long {
		t.Errorf("refused after the promise: delay %v, want %v", got, long)
	}
	if got := w.lookAgain(long, now.Add(time.Second), false, true); got != store.WakeEvery {
		t.Errorf("after a first registration: delay %v, want %v", got, store.WakeEvery)
	}
}

// A wait looks once more shortly after its first registration: a release
// running alongside that registration may not have seen it and woken
// nobody. Simulated by deleting the holder's row, with no notification,
// just before the second attempt; the waiter's timer (TTL and
// PollInterval: 10 minutes) would come far too late.
func TestWaitLooksOnceMoreAfterItsFirstRegistration(t *testing.T) {
	ctx := testCtx(t)
	holder, waiter := slowPair(t)
	if _, err := holder.TryAcquire(ctx, "unseen", WithTTL(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, second, proceed := holdAttempt(t, waiter, 2)
	got := waitingFor(ctx, waiter, "unseen")
	pgtest.Receive(t, second, "the waiter's look after its first registration")
	pgtest.Exec(t, `DELETE FROM `+holder.st.Names.QualifiedTable()+` WHERE name = 'unseen'`)
	proceed()
	if err := pgtest.Receive(t, got, "the acquisition by that look"); err != nil {
		t.Fatal(err)
	}
}

// The goroutines of one client waiting on names held by one fast-failover
// holder share one watcher (of its bell, which the holder's session frees
// as it ends), and all take over at once when the holder's session ends.
func TestFastFailoverWaitsShareOneWatcher(t *testing.T) {
	ctx := testCtx(t)
	holder := testClient(t, Config{Owner: "ff-holder"})
	waiter := testClient(t, Config{Table: holder.cfg.Table, Owner: "ff-waiter", PollInterval: time.Minute})
	const n = 4
	for i := range n {
		if _, err := holder.TryAcquire(ctx, fmt.Sprint("ff", i), WithFastFailover(), WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan error, n)
	for i := range n {
		go func() {
			_, err := waiter.Acquire(ctx, fmt.Sprint("ff", i), WithFastFailover(), WithTTL(time.Minute))
			got <- err
		}()
	}
	watchers := func() int {
		return pgtest.Value[int](t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND application_name LIKE '%ff-waiter%'`)
	}
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's session", func() bool { return watchers() > 0 })
	for i := range n {
		waitQueued(t, holder, waiter, fmt.Sprint("ff", i))
	}
	// A watch on the dedicated session is interrupted by the client's own
	// statements (each wait's attempts), and waits again after them.
	pgtest.WaitFor(t, patience, "one connection of the waiting client to wait on the holder", func() bool { return watchers() == 1 })
	waiter.wake.mu.Lock()
	all := len(waiter.wake.watchers) + len(waiter.wake.bells)
	waiter.wake.mu.Unlock()
	if all != 1 {
		t.Fatalf("the waiting client runs %d watchers of the holder (its bell or its session), want 1", all)
	}
	pgtest.Exec(t, `SELECT pg_terminate_backend(session_pid) FROM `+holder.st.Names.QualifiedTable()+` WHERE name = 'ff0'`)
	for range n {
		if err := pgtest.Receive(t, got, "a take-over after the holder's session ended"); err != nil {
			t.Fatal(err)
		}
	}
}

// A wait that gives up while its statement is in flight leaves the queue
// once that statement has ended: the statement, which goes on after the
// call returned, registers the wait again (with a fresh expiry), and a
// leave sent at once would come first and leave that registration behind,
// live for the queue's TTL (3 × PollInterval + 26 s) while the client
// lives, the name promised to it and every other waiter held up.
func TestAWaitThatGivesUpMidStatementLeavesTheQueue(t *testing.T) {
	ctx := testCtx(t)
	h := testClient(t, Config{})
	cfg := Config{Table: h.cfg.Table, PollInterval: 5 * time.Second}
	w := testClient(t, cfg)
	other := testClient(t, cfg)
	held, err := h.TryAcquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := waitFor(wctx, w, "q")
	waitQueued(t, h, w, "q")

	// A transaction holds the name's lock, which every acquisition takes
	// first: w's next attempt (its poll) waits for it on the server.
	ns, err := w.st.LockNamespace()
	if err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Conn(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1 || $2), hashtext($2 || $1))`, ns, "q"); err != nil {
		t.Fatal(err)
	}
	var pid int32
	pgtest.WaitFor(t, patience, "the waiter's attempt to wait for the name's lock", func() bool {
		pid = pgtest.Value[int32](t, `SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND NOT granted`)
		return pid != 0
	})
	cancel() // the caller gives up, its statement in flight
	if o := pgtest.Receive(t, got, "the wait to give up"); !errors.Is(o.err, context.Canceled) {
		t.Fatalf("the wait returned %v, %v", o.l, o.err)
	}
	// The code before the fix sent the leave at once, and it reached the
	// server before the statement went on; give it the time to (this
	// code sends it once the statement has ended).
	deadline := time.Now().Add(2 * time.Second)
	for queued(t, h, "q") > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil { // the statement goes on, and registers
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the waiter's statement to end", func() bool {
		return pgtest.Value[bool](t, `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state <> 'idle')`, pid)
	})
	pgtest.WaitFor(t, 8*time.Second, "the waiter that gave up to leave the queue (its registration lives 16 s)", func() bool {
		ws, err := h.waiters(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		return len(ws) == 0
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.TryAcquire(ctx, "q")
	if err != nil {
		t.Fatalf("the name, free, was refused to another client: %v", err)
	}
	_ = l.Release(ctx)
}

// A first waiter that watches its holder's doorbell attempts only at its
// watcher's poll (each watch timeout), and its registration in the queue
// stays fresh in between: a release wakes it, and rings, however long it
// has waited. With the registration's freshness of a waiter that polls
// (3 × PollInterval + 1 s, shorter than the watch timeout here), it went
// stale between two attempts, a release then woke nobody and rang no
// bell, and the wait learnt of it only at its next poll.
func TestAWaitOnADoorbellStaysRegisteredBetweenItsPolls(t *testing.T) {
	ctx := testCtx(t)
	cfg := Config{PollInterval: 300 * time.Millisecond}
	h := testClient(t, cfg)
	cfg.Table = h.cfg.Table
	w := testClient(t, cfg)
	w.wake.watchTimeout = 3 * time.Second
	l, err := h.Acquire(ctx, "fresh", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
	timeouts := countWatchTimeouts(t, "bell")
	got := waitFor(ctx, w, "fresh")
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's doorbell", func() bool { return bellArmed(w, h.id) })
	live := func() bool {
		return pgtest.Value[bool](t, `SELECT coalesce(bool_and("expires_at" > now()), false) FROM `+w.st.Names.QualifiedWaiters()+` WHERE "name" = 'fresh' AND "client" = $1`, w.id)
	}
	// Two of the watcher's polls, sampled.
	deadline := time.Now().Add(patience)
	for timeouts.Load() < 2 {
		if !live() {
			t.Fatalf("the waiter's registration went stale between its polls (%d watch timeouts so far)", timeouts.Load())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter's watcher timed out %d times in %v, want 2", timeouts.Load(), patience)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nl := receiveLease(t, got, "the waiter to get the name")
	_ = nl.Release(ctx)
}
