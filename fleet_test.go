package pglease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// fleetSize is the number of clients of each fleet test: enough that a
// connection more per client shows, few enough for the test server's
// max_connections.
const fleetSize = 12

// fleet opens n clients on one table, owners tag-0 … tag-(n-1), and
// returns them with a count of the server connections whose application
// name is one of theirs.
func fleet(t *testing.T, tag string, n int, cfg Config) ([]*Client, func() int) {
	t.Helper()
	cs := make([]*Client, n)
	for i := range cs {
		cfg.Owner = fmt.Sprintf("%s-%d", tag, i)
		cs[i] = testClient(t, cfg)
		cfg.Table = cs[0].cfg.Table
	}
	if err := cs[0].migrate(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	conns := func() int {
		return pgtest.Value[int](t, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1`, appName(tag+"-")+"%")
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i, c := range cs {
			s := c.conn.sess.Load()
			t.Logf("client %d: listening %v, bell watchers %d, session watchers %d", i, s != nil && s.isListening(), len(c.wake.bells), len(c.wake.watchers))
		}
		t.Logf("connections:\n%s", pgtest.Value[string](t, `SELECT string_agg(application_name || ' ' || state || ' ' || coalesce(wait_event, '-') || ' ' || left(query, 60), E'\n' ORDER BY application_name) FROM pg_stat_activity WHERE application_name LIKE $1`, appName(tag+"-")+"%"))
	})
	return cs, conns
}

// A fleet costs one connection per client (SPEC §3.4): once the pools'
// idle connections closed, each client of a fleet electing on one name,
// and each of a fleet waiting on names another client holds, keeps its
// dedicated session alone: its statements, its renewals, its bell
// watcher (or, behind a fast-failover holder, its watch of the holder's
// bell) run there. Before, a first waiter watched the holder's bell on a
// connection of its own, and every waiter behind a fast-failover holder
// watched its session on one.
func TestAFleetCostsOneConnectionPerClient(t *testing.T) {
	defer func(d time.Duration) { poolIdleTime = d }(poolIdleTime)
	poolIdleTime = time.Second
	for _, ff := range []bool{false, true} {
		var opts []Option
		mode := "plain"
		if ff {
			opts, mode = []Option{WithFastFailover()}, "fast-failover"
		}
		t.Run("electors "+mode, func(t *testing.T) {
			ctx := testCtx(t)
			tag := "fleet-e-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			cs, conns := fleet(t, tag, fleetSize, Config{PollInterval: time.Minute})
			rctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			for _, c := range cs {
				e, err := c.NewElector("leader", func(ctx context.Context) error { <-ctx.Done(); return nil },
					ElectorConfig{LeaseOptions: append([]Option{WithTTL(time.Minute)}, opts...)})
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() { _ = e.Run(rctx) })
			}
			pgtest.WaitFor(t, patience, "every other elector to queue", func() bool { return queued(t, cs[0], "leader") == fleetSize-1 })
			pgtest.WaitFor(t, patience, fmt.Sprintf("%d electors to keep %d connections", fleetSize, fleetSize), func() bool { return conns() <= fleetSize })
		})
		t.Run("waiters "+mode, func(t *testing.T) {
			ctx := testCtx(t)
			tag := "fleet-w-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			cs, conns := fleet(t, tag, fleetSize+1, Config{PollInterval: time.Minute})
			h, ws := cs[0], cs[1:]
			for i := range ws {
				if _, err := h.TryAcquire(ctx, fmt.Sprint("w", i), append([]Option{WithTTL(time.Minute)}, opts...)...); err != nil {
					t.Fatal(err)
				}
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			for i, w := range ws {
				go func() { _, _ = w.Acquire(wctx, fmt.Sprint("w", i), opts...) }()
			}
			for i, w := range ws {
				waitQueued(t, h, w, fmt.Sprint("w", i))
			}
			pgtest.WaitFor(t, patience, fmt.Sprintf("%d waiting clients and their holder to keep %d connections", len(ws), len(cs)), func() bool { return conns() <= len(cs) })
			for _, w := range ws {
				if n := watchers(w); n != 1 {
					t.Fatalf("a waiting client runs %d watchers of the holder, want 1 (its bell)", n)
				}
			}
		})
	}
}

// watchers is the number of watchers (of bells and of sessions) c runs.
func watchers(c *Client) int {
	c.wake.mu.Lock()
	defer c.wake.mu.Unlock()
	return len(c.wake.bells) + len(c.wake.watchers)
}

// A client whose dedicated session runs its statements keeps that
// connection alone (SPEC §3.4): the pool's connections that served its
// start (Open's check, its first statements while the session connected)
// close once the session serves, not after they idled for poolIdleTime; a
// fleet that starts at once needs no second connection per client for
// long. Before, each stayed open for 30 to 45 s.
func TestAClientDropsItsStartConnectionsOnceItsSessionServes(t *testing.T) {
	defer func(d time.Duration) { poolIdleTime = d }(poolIdleTime)
	poolIdleTime = time.Hour
	ctx := testCtx(t)
	tag := "fleet-s-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cs, conns := fleet(t, tag, 2, Config{})
	if got := conns(); got < 2 {
		t.Fatalf("%d connections after Open, want each client's pool connection", got)
	}
	l, err := cs[0].TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs[1].TryAcquire(ctx, "job"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a second client's TryAcquire: %v, want held", err)
	}
	pgtest.WaitFor(t, patience, "each client to keep its session alone", func() bool { return conns() == 2 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := conns(); got != 2 {
		t.Fatalf("%d connections after a release, want 2", got)
	}
}

// A watcher that blocks on a connection of its own because the session's
// watch slot was taken (here by the watcher of another holder's bell)
// moves back to the session once the slot is free, rather than keep its
// connection for as long as it watches. Before, it kept it: a fleet
// waiting behind fast-failover holders measured two connections per
// client once a watcher of the holder's session had held the slot while
// its bell's watcher started.
func TestAWatcherMovesBackToTheSessionWhenTheSlotFrees(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	h1, h2, w := cs[0], cs[1], cs[2]
	w.wake.watchTimeout = 300 * time.Millisecond
	conns := func() int {
		return pgtest.Value[int](t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName(w.cfg.Owner))
	}
	l1, err := h1.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := h2.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Client{h1, h2} {
		pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
	}
	ga := waitFor(ctx, w, "a")
	pgtest.WaitFor(t, patience, "the waiter to watch the first holder's doorbell", func() bool { return bellArmed(w, h1.id) })
	gb := waitFor(ctx, w, "b")
	pgtest.WaitFor(t, patience, "the waiter to watch the second holder's doorbell", func() bool { return bellArmed(w, h2.id) })
	pgtest.WaitFor(t, patience, "the second watcher's connection", func() bool { return conns() == 2 })
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	la := receiveLease(t, ga, "the waiter to get the first name")
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the second watcher to move back to the session", func() bool { return conns() == 1 })
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := receiveLease(t, gb, "the waiter to get the second name at the ring")
	_ = lb.Release(ctx)
}

// A wait behind a fast-failover holder that watched the holder's session
// while its client's session was not up yet (it could not watch a bell
// then) stops watching that session once it watches the holder's bell,
// which the holder's session frees as it ends: it keeps no connection of
// its own for it. Before, the session's watcher stayed for as long as the
// wait: 1,000 clients waiting on names a fast-failover holder had tried
// kept two connections each (S7).
func TestAWaitThatWatchesTheBellDropsItsWatchOfTheHoldersSession(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	l := mustTry(t, h, "ff")
	defer l.Release(ctx)
	pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
	// The waiter's session connects only once its wait watches the
	// holder's session.
	up := make(chan struct{})
	hook := func(client string) {
		if client == w.id {
			<-up
		}
	}
	testHookConnect.Store(&hook)
	t.Cleanup(func() { testHookConnect.Store(nil) })
	wctx, cancel := context.WithCancel(ctx)
	got := waitFor(wctx, w, "ff")
	defer func() { cancel(); <-got }()
	pgtest.WaitFor(t, patience, "the wait to watch the holder's session", func() bool { return watchers(w) == 1 && !bellArmed(w, h.id) })
	close(up)
	pgtest.WaitFor(t, patience, "the wait to watch the holder's bell", func() bool { return bellArmed(w, h.id) })
	pgtest.WaitFor(t, patience, "the wait to stop watching the holder's session", func() bool {
		w.wake.mu.Lock()
		defer w.wake.mu.Unlock()
		return len(w.wake.watchers) == 0
	})
	conns := func() int {
		return pgtest.Value[int](t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName(w.cfg.Owner))
	}
	pgtest.WaitFor(t, patience, "the waiting client to keep its session alone", func() bool { return conns() == 1 })
}

// A client's statement that comes while its session is backlogged (two of
// its statements on it, queued or running) runs on the pool, rather than
// queue behind them: one connection runs one statement at a time, each
// waiting for its own WAL flush, and 16 goroutines of a client acquiring
// leases on distinct names ran one at a time (CAP: 10,000 leases in 16 s,
// docs/BENCHMARKS.md). Shown by statements issued while one runs: before,
// the third queued behind the first, which waited for it, until its
// context ended.
func TestAStatementBesideOthersRunsOnThePool(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "warm"); err != nil { // starts the session
		t.Fatal(err)
	}
	var s *session
	pgtest.WaitFor(t, patience, "the session to run the client's statements", func() bool {
		s = c.conn.sess.Load()
		return s != nil && s.servesNow()
	})
	list := func(st **sessState) func(context.Context, store.DB, *sessState) error {
		return func(ctx context.Context, q store.DB, got *sessState) error {
			*st = got
			_, err := c.st.List(ctx, q)
			return err
		}
	}
	var outer, second, third *sessState
	var secondErr, thirdErr error
	secondDone := make(chan struct{})
	err := c.exec(ctx, func(_ context.Context, _ store.DB, st *sessState) error {
		outer = st
		go func() {
			defer close(secondDone)
			// The test's context: the first statement's own ends as it
			// returns, and the second, still queued then, would not run
			// (a clean-clone CI run failed so).
			secondErr = c.exec(ctx, list(&second))
		}()
		pgtest.WaitFor(t, patience, "a second statement to queue on the session", func() bool { return s.execs.Load() == execsOnSession })
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		thirdErr = c.exec(tctx, list(&third))
		return nil
	})
	<-secondDone
	if err != nil || secondErr != nil || thirdErr != nil {
		t.Fatalf("the statements failed: %v, %v, %v", err, secondErr, thirdErr)
	}
	if outer == nil || second == nil {
		t.Fatal("the first two statements did not run on the session")
	}
	if third != nil {
		t.Fatal("the third statement ran on the session, behind the first two")
	}
}
