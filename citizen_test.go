package pglease

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/pgtest"
)

// A good citizen of the database: while clients wait or hold,
// none of their snapshots or transactions lives longer than a bound, so
// VACUUM removes the rows deleted before it and CREATE INDEX CONCURRENTLY
// on another table is not held up. A statement that blocks on the server
// (a watcher of a holder's bell or session) holds a snapshot for as long as
// it blocks; each ends after the client's watchTimeout, shortened here,
// and waits again.

// testWatchTimeout is the watchers' wait bound in these tests: short, so
// that the tests need not wait out 20 s, and long enough for every watcher
// to block between two of its timeouts.
const testWatchTimeout = time.Second

// waitersOfEveryTopology is a set of clients of one table that hold and wait
// in every topology that makes a waiting client block on the server: the
// first waiter of a plain lease whose holder tried (and has a session from
// its renewals), the first waiter of a fast-failover holder that watches
// the holder's session, and an Elector's follower (the leader
// waited for its term). Every client's connections carry the application
// name app.
type waitersOfEveryTopology struct {
	app     string
	release func(t *testing.T) // ends the holds and checks the hand-offs
}

func startWaitersOfEveryTopology(t *testing.T, ctx context.Context) *waitersOfEveryTopology {
	t.Helper()
	owner := pgtest.AppName("citizen")
	cfg := Config{Owner: owner, PollInterval: time.Hour}
	client := func() *Client {
		c := testClient(t, cfg)
		cfg.Table = c.cfg.Table
		c.wake.watchTimeout = testWatchTimeout
		return c
	}

	// The holder tried; its renewals open its session, and its bell.
	h1, w1 := client(), client()
	l1, err := h1.TryAcquire(ctx, "tried", WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got1 := waitFor(ctx, w1, "tried", WithTTL(time.Minute))

	// A fast-failover holder, whose waiter watches its session (not its
	// bell: the waiter's session listens already).
	h2, w2 := client(), client()
	l2 := mustTry(t, h2, "ff")
	listenFirst(t, w2)
	got2 := waitFor(ctx, w2, "ff", ffOpts...)

	// An Elector's leader (it waited for its term) and its follower.
	h3, w3 := client(), client()
	elected := make(chan *Client, 2)
	elector := func(c *Client) func() {
		e, err := c.NewElector("elect", func(ctx context.Context) error {
			elected <- c
			<-ctx.Done()
			return nil
		}, ElectorConfig{LeaseOptions: []Option{WithTTL(time.Minute)}})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(rctx) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		return stop
	}
	stopLeader := elector(h3)
	if c := pgtest.Receive(t, elected, "the first elector to lead"); c != h3 {
		t.Fatal("the follower leads")
	}
	elector(w3)

	pgtest.WaitFor(t, patience, "the other waiters to watch their holders' doorbells", func() bool {
		return bellArmed(w1, h1.id) && bellArmed(w3, h3.id)
	})
	pgtest.WaitFor(t, patience, "the fast-failover waiter to watch the holder's session", func() bool {
		w2.wake.mu.Lock()
		defer w2.wake.mu.Unlock()
		return len(w2.wake.watchers) > 0
	})
	app := appName(owner)
	pgtest.WaitFor(t, patience, "the three watchers to block on the server", func() bool {
		return pgtest.Value[int](t, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app) >= 3
	})

	return &waitersOfEveryTopology{app: app, release: func(t *testing.T) {
		for _, l := range []*Lease{l1, l2} {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		stopLeader()
		// The polls are an hour and the TTLs a minute: a hand-off within
		// patience is a ring or a session's end seen by a watcher that
		// waited again and again.
		for _, got := range []<-chan outcome{got1, got2} {
			_ = receiveLease(t, got, "a waiter to get the name its holder released").Release(ctx)
		}
		if c := pgtest.Receive(t, elected, "the follower to lead when the leader stepped down"); c != w3 {
			t.Fatal("the old leader leads again")
		}
	}}
}

// transactionsOlderThan returns the transactions open on the server (so,
// their snapshots) of the backends of app begun before at, described.
func transactionsOlderThan(t *testing.T, app string, at time.Time) []string {
	t.Helper()
	var old []string
	conn := pgtest.Conn(t)
	rows, err := conn.Query(context.Background(), `SELECT pid, state, coalesce(wait_event, ''), extract(epoch FROM clock_timestamp() - xact_start)::float8, query
		  FROM pg_stat_activity WHERE application_name = $1 AND xact_start < $2`, app, at)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid int32
		var state, event, query string
		var age float64
		if err := rows.Scan(&pid, &state, &event, &age, &query); err != nil {
			t.Fatal(err)
		}
		old = append(old, fmt.Sprintf("pid %d %s (%s) for %.1fs: %s", pid, state, event, age, query))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(context.Background())
	return old
}

// oldestTransaction returns the age of the oldest transaction open on the
// server of a backend of app (0 without any).
func oldestTransaction(t *testing.T, app string) time.Duration {
	t.Helper()
	ms := pgtest.Value[float64](t, `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start) * 1000), 0)::float8
		  FROM pg_stat_activity WHERE application_name = $1`, app)
	return time.Duration(ms * float64(time.Millisecond))
}

// awaitNoOldTransactions waits until no backend of app has a transaction
// open that began before at, and marks the test failed, with those it
// saw, if one stays open longer than the watchers' bound allows, or past
// patience.
func awaitNoOldTransactions(t *testing.T, app string, at time.Time) {
	t.Helper()
	bound := testWatchTimeout + 5*time.Second // generous: two loaded cores
	var oldest time.Duration
	var seen []string
	ok := pgtest.Eventually(patience, func() bool {
		oldest = max(oldest, oldestTransaction(t, app))
		seen = transactionsOlderThan(t, app, at)
		return len(seen) == 0 || oldest > bound
	})
	if !ok || oldest > bound {
		t.Errorf("a waiting client's transaction lived %s (bound %s); begun before the deletion, still open: %q", oldest, bound, seen)
	}
	t.Logf("oldest transaction of a waiting client seen: %s", oldest)
}

// deadRows creates a table of n rows without autovacuum in a schema of the
// test and deletes them all, and returns the table and the server's time
// once the deletion committed.
func deadRows(t *testing.T, n int) (string, time.Time) {
	t.Helper()
	table := pgx.Identifier{pgtest.Schema(t), "dead"}.Sanitize()
	pgtest.Exec(t, `CREATE TABLE `+table+` WITH (autovacuum_enabled = off) AS SELECT g FROM generate_series(1, $1::int) AS g`, n)
	pgtest.Exec(t, `DELETE FROM `+table)
	return table, pgtest.Value[time.Time](t, `SELECT clock_timestamp()`)
}

// vacuumRemoved runs VACUUM (VERBOSE) on table and returns how many dead
// rows it removed and how many it found dead but not yet removable (rows
// an open snapshot may still see).
func vacuumRemoved(t *testing.T, table string) (removed, kept int) {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `VACUUM (VERBOSE) `+table); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`tuples: (\d+) removed, \d+ remain, (\d+) are dead but not yet removable`)
	mu.Lock()
	defer mu.Unlock()
	for _, n := range notices {
		if m := re.FindStringSubmatch(n); m != nil {
			removed, _ = strconv.Atoi(m[1])
			kept, _ = strconv.Atoi(m[2])
			return removed, kept
		}
	}
	t.Fatalf("VACUUM (VERBOSE) reported no tuple counts: %q", notices)
	return 0, 0
}

// While clients wait in every topology (and their holders hold), VACUUM
// removes the rows deleted a watch timeout earlier, in a table pglease
// never touches: no snapshot of theirs is older. (A watcher blocked on a
// holder's bell or session in one statement until the holder released
// kept every row deleted since in the whole database: 10,000 of 10,000
// after VACUUM.)
func TestWaitingClientsDoNotHoldBackVacuum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
	defer cancel()
	ws := startWaitersOfEveryTopology(t, ctx)
	const n = 10000
	table, deleted := deadRows(t, n)
	awaitNoOldTransactions(t, ws.app, deleted)
	removed, kept := vacuumRemoved(t, table)
	if removed != n {
		t.Fatalf("VACUUM removed %d of %d deleted rows (%d dead but not yet removable); old transactions: %q",
			removed, n, kept, transactionsOlderThan(t, ws.app, deleted))
	}
	ws.release(t)
}

// While clients wait in every topology, CREATE INDEX CONCURRENTLY on
// another table (which waits for every transaction whose snapshot could
// miss the rows it indexes) completes within a watch timeout or so, not
// once the waits end.
func TestWaitingClientsDoNotHoldUpCreateIndexConcurrently(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
	defer cancel()
	ws := startWaitersOfEveryTopology(t, ctx)
	table := pgx.Identifier{pgtest.Schema(t), "indexed"}.Sanitize()
	pgtest.Exec(t, `CREATE TABLE `+table+` AS SELECT g FROM generate_series(1, 1000) AS g`)
	conn := pgtest.Conn(t)
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := conn.Exec(cctx, `CREATE INDEX CONCURRENTLY ON `+table+` (g)`)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		old := transactionsOlderThan(t, ws.app, time.Now())
		stop()
		<-done
		t.Fatalf("CREATE INDEX CONCURRENTLY still waited after %s (watch timeout %s); transactions of the waiting clients: %q",
			patience, testWatchTimeout, old)
	}
	t.Logf("CREATE INDEX CONCURRENTLY took %s", time.Since(start))
	ws.release(t)
}

// listenFirst makes c's session listen for notifications (c holds a lease
// that hears step-down requests), so that its waits on fast-failover
// holders watch their sessions, not their bells.
func listenFirst(t *testing.T, c *Client) {
	t.Helper()
	l := mustTry(t, c, "listen "+c.id)
	l.StepDownRequested()
	pgtest.WaitFor(t, patience, "the client to listen for step-down requests", func() bool { return listening(c) })
}

// bellState describes how w waits for h: for a test that failed to see it
// watch h's bell.
func bellState(w, h *Client) string {
	w.wake.mu.Lock()
	b := w.wake.bells[h.id]
	state := "no watcher"
	if b != nil {
		state = fmt.Sprintf("watcher armed %v, quiet %v, failed %v, waits %v", b.armed, b.quiet, b.failed, b.names)
	}
	w.wake.mu.Unlock()
	return fmt.Sprintf("%s; waiter listening %v, live %v; holder live %v", state, listening(w), w.conn.sess.Load().isLive(), h.conn.sess.Load().isLive())
}

// countWatchTimeouts counts the watch timeouts of one kind ("bell",
// "session") of every watcher until the test ends.
func countWatchTimeouts(t *testing.T, kind string) *atomic.Int64 {
	var n atomic.Int64
	hook := func(k string) {
		if k == kind {
			n.Add(1)
		}
	}
	testHookWatchTimeout.Store(&hook)
	t.Cleanup(func() { testHookWatchTimeout.Store(nil) })
	return &n
}

// A first waiter whose watcher of the holder's bell timed out and waited
// again several times still gets the name at once when the holder
// releases (the poll is an hour, the TTL a minute).
func TestAWaitOnTheDoorbellThatTimedOutStillWakesAtTheRing(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	w.wake.watchTimeout = 200 * time.Millisecond
	timeouts := countWatchTimeouts(t, "bell")
	l, err := h.Acquire(ctx, "bell") // a wait: the holder has a session, and a bell
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(ctx, w, "bell")
	pgtest.WaitFor(t, patience, "the watcher of the holder's bell to time out three times", func() bool { return timeouts.Load() >= 3 })
	if !bellArmed(w, h.id) {
		t.Fatal("the watcher disarmed")
	}
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nl := receiveLease(t, got, "the waiter to get the name when the holder's release rang")
	t.Logf("hand-off after %d timeouts: %s", timeouts.Load(), time.Since(start))
	_ = nl.Release(ctx)
}

// A fast-failover waiter whose watcher of the holder's session timed out
// and waited again several times still takes over at once when that
// session ends.
func TestAWatchOfASessionThatTimedOutStillSeesItEnd(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	w.wake.watchTimeout = 200 * time.Millisecond
	timeouts := countWatchTimeouts(t, "session")
	l := mustTry(t, h, "ff")
	listenFirst(t, w)
	got := waitFor(ctx, w, "ff", ffOpts...)
	pgtest.WaitFor(t, patience, "the watcher of the holder's session to time out three times", func() bool { return timeouts.Load() >= 3 })
	start := time.Now()
	endSession(t, l)
	nl := receiveLease(t, got, "the waiter to take over when the holder's session ended")
	t.Logf("take-over after %d timeouts: %s", timeouts.Load(), time.Since(start))
	if nl.Token() <= l.Token() {
		t.Fatalf("token %d after %d", nl.Token(), l.Token())
	}
}

// Releases that race with the watchers' timeouts are not missed: two
// clients hand a name back and forth while the waiter's watcher times out
// every millisecond or so, so that many releases come between a timeout
// and the next wait; each hand-off still comes at the ring (the poll is
// an hour, the TTL a minute).
func TestReleasesRacingWatchTimeoutsAreNotMissed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
	defer cancel()
	cs := ffClients(t, 2)
	for _, c := range cs {
		c.wake.watchTimeout = time.Millisecond
	}
	timeouts := countWatchTimeouts(t, "bell")
	l, err := cs[0].Acquire(ctx, "race")
	if err != nil {
		t.Fatal(err)
	}
	// Both sessions up first: a wait that finds the holder without a bell
	// listens, and so do the client's later waits while its session
	// lingers listening, on notifications rather than bells.
	for _, c := range cs {
		s, err := c.session()
		if err != nil {
			t.Fatal(err)
		}
		pgtest.WaitFor(t, patience, "the client's session", s.isLive)
	}
	const rounds = 40
	for i := range rounds {
		h, w := cs[i%2], cs[(i+1)%2]
		got := waitFor(ctx, w, "race")
		if !pgtest.Eventually(patience, func() bool { return bellArmed(w, h.id) }) {
			t.Fatalf("round %d: the waiter does not watch the holder's doorbell: %s", i, bellState(w, h))
		}
		before := timeouts.Load()
		pgtest.WaitFor(t, patience, "the watcher to time out", func() bool { return timeouts.Load() > before })
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l = receiveLease(t, got, fmt.Sprintf("round %d: the waiter to get the name at the ring", i))
	}
	t.Logf("%d hand-offs, %d watch timeouts", rounds, timeouts.Load())
	_ = l.Release(ctx)
}

// A wait that watches a doorbell polls at its watcher's pace, not at each
// PollInterval: its session's watch is armed again at most once per watch
// timeout (SPEC §1.9), and each time the wait looks once (its fallback
// poll). That holds for the first waiter, which watches its holder's
// bell, and for a wait behind another, which watches the bell of the
// waiter ahead. Before, the first waiter's watch timed out at each
// PollInterval, and the wait attempted and armed it again each time (here
// 60 times in 3 s, where 4 are allowed); until 80119d8 a wait behind
// another still polled at each PollInterval, interrupting its watch each
// time (S5: 3.7 statements a second for 1,000 waits in ten clients, where
// 3.2 are allowed).
func TestAWaitOnADoorbellArmsItsWatchAtMostOncePerWatchTimeout(t *testing.T) {
	for _, behind := range []bool{false, true} {
		name := "first waiter"
		if behind {
			name = "behind another"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			cfg := Config{PollInterval: 50 * time.Millisecond}
			h := testClient(t, cfg)
			cfg.Table = h.cfg.Table
			w := testClient(t, cfg)
			const watch, window = time.Second, 3 * time.Second
			w.wake.watchTimeout = watch
			l, err := h.Acquire(ctx, "citizen", WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
			watched := h.id
			if behind {
				f := testClient(t, cfg)
				fctx, cancel := context.WithCancel(ctx)
				got := waitFor(fctx, f, "citizen")
				defer func() { cancel(); <-got }()
				waitQueued(t, h, f, "citizen")
				pgtest.WaitFor(t, patience, "the first waiter's session to hold its bell", func() bool { return belled(f) })
				watched = f.id
			}
			attempts := countAttemptsOf(t, w)
			timeouts := countWatchTimeouts(t, "bell")
			wctx, cancel := context.WithCancel(ctx)
			got := waitFor(wctx, w, "citizen")
			defer func() { cancel(); <-got }()
			pgtest.WaitFor(t, patience, "the waiter to watch its doorbell", func() bool { return bellArmed(w, watched) })
			a0 := attempts.Load()
			t0 := timeouts.Load()
			time.Sleep(window)
			a, n := attempts.Load()-a0, timeouts.Load()-t0
			t.Logf("in %v: %d attempts, %d watch timeouts", window, a, n)
			if limit := int64(window/watch) + 1; a > limit || n > limit {
				t.Fatalf("in %v the waiter attempted %d times and its watch timed out %d times, want at most %d each (one per watch timeout of %v, PollInterval %v)", window, a, n, limit, watch, cfg.PollInterval)
			}
			pgtest.WaitFor(t, patience, "the waiter to look again (its fallback poll)", func() bool { return attempts.Load() > a0 })
		})
	}
}

// A first waiter that watches its holder's doorbell looks at its holder's
// expiry when it comes, and the watch's statement ends then (it waits
// until the first of that and its timeout): its attempts do not
// interrupt the watch with cancel requests. Before, each look at the
// expiry of a holder that renews interrupted it (here about one per
// second), and a thousand waits on names one client renewed at once sent
// a burst of cancel requests at every renewal.
func TestAWaitOnADoorbellLooksAtTheExpiryWithoutInterruptingItsWatch(t *testing.T) {
	ctx := testCtx(t)
	cfg := Config{PollInterval: time.Hour}
	h := testClient(t, cfg)
	cfg.Table = h.cfg.Table
	w := testClient(t, cfg)
	l, err := h.Acquire(ctx, "expiry", WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
	attempts := countAttemptsOf(t, w)
	var interrupts atomic.Int64
	interrupt := func(client string) {
		if client == w.id {
			interrupts.Add(1)
		}
	}
	testHookInterrupt.Store(&interrupt)
	t.Cleanup(func() { testHookInterrupt.Store(nil) })
	wctx, cancel := context.WithCancel(ctx)
	got := waitFor(wctx, w, "expiry")
	defer func() { cancel(); <-got }()
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's doorbell", func() bool { return bellArmed(w, h.id) })
	a0, i0 := attempts.Load(), interrupts.Load()
	pgtest.WaitFor(t, patience, "the waiter to look at its holder's expiry five times", func() bool { return attempts.Load()-a0 >= 5 })
	a, i := attempts.Load()-a0, interrupts.Load()-i0
	t.Logf("%d looks at the holder's expiry, %d cancel requests", a, i)
	if i > 1 {
		t.Fatalf("%d looks at the holder's expiry sent %d cancel requests to the waiter's own watch, want at most 1", a, i)
	}
}
