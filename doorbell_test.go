package pglease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// bellArmed reports whether c watches holder's doorbell, armed.
func bellArmed(c *Client, holder string) bool {
	c.wake.mu.Lock()
	defer c.wake.mu.Unlock()
	w := c.wake.bells[holder]
	return w != nil && w.armed && !w.quiet && !w.failed
}

// anyBellArmed reports whether c watches a doorbell, armed.
func anyBellArmed(c *Client) bool {
	c.wake.mu.Lock()
	defer c.wake.mu.Unlock()
	for _, w := range c.wake.bells {
		if w.armed && !w.quiet && !w.failed {
			return true
		}
	}
	return false
}

// belled reports whether c's dedicated session holds its bell.
func belled(c *Client) bool {
	s := c.conn.sess.Load()
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.belled
}

// listening reports whether c's dedicated session listens for
// notifications.
func listening(c *Client) bool {
	s, err := c.session()
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listening
}

// A client first in the queue for a name waits on the holder's doorbell,
// not for notifications: its session does not listen (the server signals
// every listening backend at every NOTIFY, so a fleet of such waiters
// would slow every release in the database), and the holder's release
// rings the bell, which hands the name over at once (the waiter's poll is
// an hour).
func TestFirstWaiterWatchesTheDoorbellInsteadOfListening(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	l, err := h.Acquire(ctx, "bell") // a wait: the holder has a session, and a bell
	if err != nil {
		t.Fatal(err)
	}
	// The holder's session comes up beside its acquisition. A waiter that
	// looks first finds no bell and listens (for listenLinger after it
	// watches the bell that comes later): wait for the bell, as a holder
	// of some time has one (a CI flake on a loaded machine).
	pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
	got := waitFor(ctx, w, "bell")
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's doorbell", func() bool { return bellArmed(w, h.id) })
	if listening(w) {
		t.Fatal("the waiter's session listens for notifications")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nl := receiveLease(t, got, "the waiter to get the name when the holder's release rang")
	defer nl.Release(ctx)
	nl.StepDownRequested()
	pgtest.WaitFor(t, patience, "the new holder to listen for step-down requests", func() bool { return listening(w) })
}

// A release between a waiter's refused attempt and its watcher's first
// look at the holder's bell rings unseen; the waiter looks again once its
// watcher is armed, and gets the name at once.
func TestARingBeforeTheWatcherIsArmedIsNotMissed(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	l, err := h.Acquire(ctx, "bell")
	if err != nil {
		t.Fatal(err)
	}
	probing, proceed := make(chan string, 1), make(chan struct{})
	hook := func(holder string) {
		select {
		case probing <- holder:
			<-proceed
		default:
		}
	}
	testHookBell.Store(&hook)
	t.Cleanup(func() { testHookBell.Store(nil) })
	got := waitFor(ctx, w, "bell")
	pgtest.Receive(t, probing, "the waiter's watcher to start")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	nl := receiveLease(t, got, "the waiter to get the name released before its watcher was armed")
	_ = nl.Release(ctx)
}

// A holder without a bell (a client without a dedicated session:
// Config.DisableNotify) is waited for by notifications: the waiter's
// watcher finds no bell, and the waiter listens.
func TestAWaiterOfAHolderWithoutABellListens(t *testing.T) {
	ctx := testCtx(t)
	w := testClient(t, Config{PollInterval: time.Hour})
	h := testClient(t, Config{Table: w.cfg.Table, DisableNotify: true})
	l, err := h.TryAcquire(ctx, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	if h.conn.sess.Load() != nil {
		t.Fatal("a client with DisableNotify opened a session")
	}
	got := waitFor(ctx, w, "quiet")
	pgtest.WaitFor(t, patience, "the waiter to listen", func() bool { return listening(w) })
	if bellArmed(w, h.id) {
		t.Fatal("the waiter watches a bell the holder does not have")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nl := receiveLease(t, got, "the waiter to get the name when the release notified it")
	_ = nl.Release(ctx)
}

// A holder listens for step-down requests once it asks to hear them, and
// a client that then holds and waits for nothing stops listening after its
// linger.
func TestAnIdleClientStopsListening(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	c.wake.listenLinger = 200 * time.Millisecond
	l, err := c.Acquire(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	if listening(c) {
		t.Fatal("a holder that asked for no step-down requests listens")
	}
	l.StepDownRequested()
	pgtest.WaitFor(t, patience, "the holder to listen for step-down requests", func() bool { return listening(c) })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the idle client to stop listening", func() bool { return !listening(c) })
}

// A holder whose dedicated session connects only after its waiter looked
// for its bell (its first try ran on the pool while the session connected)
// is waited for by notifications until then; the waiter's watcher looks
// again, finds the bell, and the waiter watches it.
func TestAWaiterWatchesABellThatCameLater(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	proceed := make(chan struct{})
	hook := func(client string) {
		if client == h.id {
			<-proceed
		}
	}
	testHookConnect.Store(&hook)
	t.Cleanup(func() { testHookConnect.Store(nil) })
	var once sync.Once
	release := func() { once.Do(func() { close(proceed) }) }
	t.Cleanup(release)
	l, err := h.TryAcquire(ctx, "late", WithTTL(time.Hour)) // on the pool: the session waits for proceed
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(ctx, w, "late")
	pgtest.WaitFor(t, patience, "the waiter to listen while the holder has no bell", func() bool { return listening(w) })
	if bellArmed(w, h.id) {
		t.Fatal("the waiter watches a bell the holder does not have yet")
	}
	release() // the holder's session connects
	s, err := h.session()
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the holder's session", s.isLive)
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's new bell", func() bool { return bellArmed(w, h.id) })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nl := receiveLease(t, got, "the waiter to get the name")
	_ = nl.Release(ctx)
}

// A wait for an exclusive lease refused by shared holders watches the
// doorbell of one of them, not for notifications (schema version 11: the
// refusal names a shared holder's client, and its release rings): a fleet
// waiting behind readers does not slow every release in the database. When
// several clients share the name, the waiter gets it once the last one
// released, whichever order they release in (its poll is an hour): the
// release of the holder it watches rings, and the waiter then watches the
// next; a release of another finds the one it watches still holding.
func TestAWaiterBehindSharedHoldersWatchesADoorbell(t *testing.T) {
	for _, watchedFirst := range []bool{false, true} {
		name := "the other holder releases first"
		if watchedFirst {
			name = "the watched holder releases first"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			cs := ffClients(t, 3)
			hs, w := cs[:2], cs[2]
			held := map[string]*Lease{}
			for _, h := range hs {
				l, err := h.TryAcquire(ctx, "readers", WithShared())
				if err != nil {
					t.Fatal(err)
				}
				held[h.id] = l
				pgtest.WaitFor(t, patience, "the shared holder's session to hold its bell", func() bool { return belled(h) })
			}
			got := waitFor(ctx, w, "readers")
			var watched, other *Client
			pgtest.WaitFor(t, patience, "the waiter to watch a shared holder's doorbell", func() bool {
				for i, h := range hs {
					if bellArmed(w, h.id) {
						watched, other = h, hs[1-i]
						return true
					}
				}
				return false
			})
			if listening(w) {
				t.Fatal("the waiter's session listens for notifications")
			}
			first, second := other, watched
			if watchedFirst {
				first, second = watched, other
			}
			if err := held[first.id].Release(ctx); err != nil {
				t.Fatal(err)
			}
			if watchedFirst {
				pgtest.WaitFor(t, patience, "the waiter to watch the remaining holder's doorbell", func() bool { return bellArmed(w, second.id) })
			}
			select {
			case o := <-got:
				t.Fatalf("the waiter got the name while a shared holder holds it: %v, %v", o.l, o.err)
			default:
			}
			if err := held[second.id].Release(ctx); err != nil {
				t.Fatal(err)
			}
			nl := receiveLease(t, got, "the waiter to get the name when the last shared holder released")
			_ = nl.Release(ctx)
		})
	}
}

// A wait queued behind another, behind a fast-failover holder, watches the
// bell of the waiter directly ahead (lookAhead): when the name passes to
// that waiter without a ring (the holder's release came within the first
// waiter's turn, after it had been woken once, so the release woke nobody
// and the first waiter looks again by itself), the wait behind goes on
// watching the same client, now the holder, and takes the name at its
// release. A wait that watches the holder's bell instead (one that found
// nobody ahead, or of release 11, before lookAhead) learns of the hand-off
// as the releasing client rings its bell soon after, unless it took the
// name again (ringUnlessRetaken). Before that ring, such a wait went on
// watching a client that no longer held the name, and learnt of its own
// turn only at its poll: 16 separate clients contending for one
// fast-failover name managed 17 acquisitions a second instead of 400.
func TestAWaitBehindLearnsOfAHandOffThatRangNoBell(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lookAhead bool
	}{{"it watches the waiter ahead", true}, {"it watches the holder", false}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.lookAhead {
				testHookNoLookAhead.Store(true)
				t.Cleanup(func() { testHookNoLookAhead.Store(false) })
			}
			ctx := testCtx(t)
			cs := ffClients(t, 3)
			h, first, second := cs[0], cs[1], cs[2]
			for _, c := range cs {
				c.wake.watchTimeout = time.Minute // no watch's poll within the test's patience
			}
			l, err := h.TryAcquire(ctx, "x", WithFastFailover())
			if err != nil {
				t.Fatal(err)
			}
			pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
			got1 := waitFor(ctx, first, "x", WithFastFailover())
			waitQueued(t, h, first, "x")
			pgtest.WaitFor(t, patience, "the first waiter to watch the holder's doorbell", func() bool { return bellArmed(first, h.id) })
			pgtest.WaitFor(t, patience, "the first waiter's session to hold its bell", func() bool { return belled(first) })
			got2 := waitFor(ctx, second, "x", WithFastFailover())
			waitQueued(t, h, second, "x")
			watched := h.id
			if tc.lookAhead {
				watched = first.id
			}
			pgtest.WaitFor(t, patience, "the wait behind to watch its doorbell", func() bool { return bellArmed(second, watched) })
			// The first waiter's turn began, as a release that woke it in vain
			// leaves it: the release below wakes nobody.
			pgtest.Exec(t, `UPDATE `+h.st.Names.QualifiedWaiters()+` SET "notified_at" = now() WHERE "name" = 'x' AND "client" = $1`, first.id)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l1 := receiveLease(t, got1, "the first waiter to take the name after the holder's release")
			pgtest.WaitFor(t, patience, "the wait behind to watch the new holder's doorbell or listen", func() bool {
				return bellArmed(second, first.id) || listening(second)
			})
			if err := l1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l2 := receiveLease(t, got2, "the wait behind to take the name at its turn")
			_ = l2.Release(ctx)
		})
	}
}

// A hand-off wakes its next waiter alone, for a plain name as for a
// fast-failover one: each wait behind others watches the bell of the
// waiter directly ahead (lookAhead), which its taking the name does not
// ring, and no waiting client listens. Handing the lease down a queue of n
// clients costs about n acquisition statements. Before, every
// fast-failover wait behind watched the holder's bell, and each ring woke
// them all, each to look again and watch the new holder: n(n+1)/2
// attempts, 21 for six waiters (31 statements a hand-off with ten clients
// on one name in the capacity model). A plain wait behind listened until
// issue 43's seventh stop: a NOTIFY signals every listening backend of
// the database, so each hand-off woke every waiting client's session.
func TestAHandOffWakesOnlyTheNextWaiter(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"plain", nil}, {"fast failover", []Option{WithFastFailover()}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			const n = 6
			cs := ffClients(t, n+1)
			holder := cs[0]
			for _, c := range cs {
				c.wake.watchTimeout = time.Minute // no watch's poll within the test's patience
			}
			opts := append([]Option{WithTTL(time.Minute)}, tc.opts...)
			l, err := holder.Acquire(ctx, "x", opts...) // a wait: the holder has its session, and a bell
			if err != nil {
				t.Fatal(err)
			}
			pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(holder) })
			order := queueUp(t, holder, cs[1:], "x", func(w *Client) bool {
				return anyBellArmed(w) && belled(w) && !listening(w)
			}, opts...)
			attempts := countAttempts(t)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			inOrder(t, order())
			t.Logf("%d acquisition statements for %d hand-offs", attempts.Load(), n)
			if got := attempts.Load(); got > n+2 {
				t.Errorf("handing a lease down %d queued clients took %d acquisition statements, want about %d (one per hand-off)", n, got, n)
			}
		})
	}
}

// A client that waits for several plain names, behind the same client on
// each, does not watch that client's bell for them: a bell is a client's,
// and its ring woke every wait of the watcher, each of which looked again.
// Its waits behind listen, and a hand-off of one name wakes its wait alone.
// Watching the waiter ahead for all of them (a8cea2b), the release of one
// name woke the four waits: ten clients each waiting for the same hundred
// names took 105 statements a hand-off instead of 0.8 (CAP).
func TestAClientWaitingForManyNamesBehindAnotherListens(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	h, first, second := cs[0], cs[1], cs[2]
	for _, c := range cs {
		c.wake.watchTimeout = time.Minute // no watch's poll within the test's patience
	}
	names := []string{"m0", "m1", "m2", "m3"}
	held := make([]*Lease, len(names))
	for i, n := range names {
		l, err := h.Acquire(ctx, n, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	firsts := make([]<-chan outcome, len(names))
	seconds := make([]<-chan outcome, len(names))
	for i, n := range names {
		firsts[i] = waitFor(ctx, first, n, WithTTL(time.Minute))
		waitQueued(t, h, first, n)
	}
	for i, n := range names {
		seconds[i] = waitFor(ctx, second, n, WithTTL(time.Minute))
		waitQueued(t, h, second, n)
	}
	pgtest.WaitFor(t, patience, "the second client's waits to listen or watch a bell", func() bool {
		return listening(second) || anyBellArmed(second) && belled(second)
	})
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := receiveLease(t, firsts[0], "the first client to take m0")
	attempts := countAttemptsOf(t, second)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := receiveLease(t, seconds[0], "the second client to take m0")
	if got := attempts.Load(); got > 2 {
		t.Errorf("the second client made %d attempts for one hand-off of m0, want 1 (at most 2): the release woke its waits for the other names", got)
	}
	_ = l2.Release(ctx)
	for _, l := range held[1:] {
		_ = l.Release(ctx)
	}
	for _, ch := range append(firsts[1:], seconds[1:]...) {
		if o := pgtest.Receive(t, ch, "a wait to end"); o.l != nil {
			_ = o.l.Release(ctx)
		}
	}
}

// A wait behind another watches the bell of the waiter ahead, which rings
// as that waiter gives up: the wait then finds itself first, and watches
// the holder's bell, with no release and no poll.
func TestAWaiterAheadRingsAsItGivesUp(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	h, first, second := cs[0], cs[1], cs[2]
	for _, c := range cs {
		c.wake.watchTimeout = time.Minute // no watch's poll within the test's patience
	}
	l, err := h.TryAcquire(ctx, "x", WithFastFailover(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	got1 := waitFor(firstCtx, first, "x", WithFastFailover())
	waitQueued(t, h, first, "x")
	pgtest.WaitFor(t, patience, "the first waiter to watch the holder's doorbell and hold its own", func() bool {
		return bellArmed(first, h.id) && belled(first)
	})
	got2 := waitFor(ctx, second, "x", WithFastFailover())
	waitQueued(t, h, second, "x")
	pgtest.WaitFor(t, patience, "the wait behind to watch the first waiter's doorbell", func() bool { return bellArmed(second, first.id) })
	giveUp()
	if o := pgtest.Receive(t, got1, "the first waiter to give up"); o.err == nil {
		t.Fatal("the first waiter acquired")
	}
	pgtest.WaitFor(t, patience, "the wait, first now, to watch the holder's doorbell", func() bool { return bellArmed(second, h.id) })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := receiveLease(t, got2, "the wait to take the name at the holder's release")
	_ = l2.Release(ctx)
}

// watcherWaits reports whether c's watcher of holder's bell has n waits,
// all of which looked again since it last woke them, and waits in a
// statement on the server for the bell (a lock wait: a statement that ran
// into the lock and has not been interrupted since), while c's session
// does not listen (a session that listened lingers a while, and would
// hear the release before the bell rings).
func watcherWaits(t *testing.T, c *Client, holder string, n int) bool {
	if listening(c) {
		return false
	}
	c.wake.mu.Lock()
	w := c.wake.bells[holder]
	ok := w != nil && len(w.names) == n && len(w.pending) == 0 && !w.until.IsZero()
	c.wake.mu.Unlock()
	if !ok {
		return false
	}
	return pgtest.Value[int](t, `SELECT count(*) FROM pg_locks WHERE "locktype" = 'advisory' AND NOT "granted"
	   AND "database" = (SELECT "oid" FROM pg_database WHERE "datname" = current_database())`) > 0
}

// A watcher that saw a ring, and still has waits, waits for the next ring
// without probing which bell the holder holds (one statement, not two):
// it expects the next bell, and checks that the holder holds it as it
// begins to wait (AwaitHeldBell). The next ring is seen. At 5bc485e the
// watcher probed after every ring: once here.
func TestAWatcherWaitsForTheNextRingWithoutProbing(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	la, err := h.Acquire(ctx, "ring-a")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := h.Acquire(ctx, "ring-b")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
	var probes atomic.Int32
	hook := func(holder string) {
		if holder == h.id {
			probes.Add(1)
		}
	}
	testHookBell.Store(&hook)
	t.Cleanup(func() { testHookBell.Store(nil) })
	gotA, gotB := waitFor(ctx, w, "ring-a"), waitFor(ctx, w, "ring-b")
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's doorbell", func() bool { return bellArmed(w, h.id) })
	pgtest.WaitFor(t, patience, "the watcher to wait on the bell for the two waits", func() bool { return watcherWaits(t, w, h.id, 2) })
	probes.Store(0) // the probes that armed it
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	na := receiveLease(t, gotA, "the waiter to get the first name when the holder's release rang")
	defer na.Release(ctx)
	// The watcher waits on the next bell before the next ring: were it to
	// find that bell rung already, it would probe (rightly).
	pgtest.WaitFor(t, patience, "the watcher to wait on the next bell", func() bool { return watcherWaits(t, w, h.id, 1) })
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nb := receiveLease(t, gotB, "the waiter to get the second name when the holder's next release rang")
	defer nb.Release(ctx)
	if n := probes.Load(); n != 0 {
		t.Fatalf("the watcher probed the holder's bell %d times after it was armed; want none", n)
	}
}

// A release that runs on the holder's session rings its doorbell in the
// same statement (schema version 12): the waiter that watches the bell
// gets the name, and the holder sends no ring of its own. (Before, every
// such hand-off cost a ring statement a round trip after the release's.)
func TestAReleaseOnTheSessionRingsInItsOwnStatement(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	l, err := h.Acquire(ctx, "own-ring")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the holder's session to hold its bell and serve", func() bool {
		s := h.conn.sess.Load()
		return belled(h) && s != nil && s.servesNow()
	})
	var rings atomic.Int32
	hook := func(client string) {
		if client == h.id {
			rings.Add(1)
		}
	}
	testHookRing.Store(&hook)
	t.Cleanup(func() { testHookRing.Store(nil) })
	got := waitFor(ctx, w, "own-ring")
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's doorbell", func() bool { return bellArmed(w, h.id) })
	pgtest.WaitFor(t, patience, "the watcher to wait on the bell", func() bool { return watcherWaits(t, w, h.id, 1) })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	n := receiveLease(t, got, "the waiter to get the name when the holder's release rang")
	defer n.Release(ctx)
	if r := rings.Load(); r != 0 {
		t.Fatalf("the holder rang its bell in %d statements of their own after the release; want none (the release rings)", r)
	}
}

// A holder that rings again before its watcher waits on the bell after the
// one it saw rung: the watcher finds that bell free, probes, and wakes the
// waits, which look again; the second release is not missed (the waiter
// does not listen, and its poll is an hour).
func TestAWatcherThatFindsTheNextBellRungLooksAgain(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	var ls []*Lease
	for _, n := range []string{"rr-a", "rr-b", "rr-c"} {
		l, err := h.Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	pgtest.WaitFor(t, patience, "the holder's session to hold its bell", func() bool { return belled(h) })
	heldBell := func() int {
		k, ok, err := h.st.ProbeBell(ctx, h.db, h.id)
		if err != nil || !ok {
			t.Fatalf("the holder's bell: %v (held %v)", err, ok)
		}
		return k
	}
	first := heldBell()
	paused, proceed := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	hook := func(holder string) {
		once.Do(func() {
			paused <- struct{}{}
			<-proceed
		})
	}
	testHookRung.Store(&hook)
	t.Cleanup(func() { testHookRung.Store(nil) })
	var got []<-chan outcome
	for _, n := range []string{"rr-a", "rr-b", "rr-c"} {
		got = append(got, waitFor(ctx, w, n))
	}
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's doorbell", func() bool { return bellArmed(w, h.id) })
	pgtest.WaitFor(t, patience, "the watcher to wait on the bell for the three waits", func() bool { return watcherWaits(t, w, h.id, 3) })
	if err := ls[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	na := receiveLease(t, got[0], "the waiter to get the first name when the holder's release rang")
	defer na.Release(ctx)
	pgtest.Receive(t, paused, "the watcher to come to its wait on the next bell")
	if err := ls[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the holder's second ring", func() bool { return heldBell() == (first+2)%store.Bells })
	close(proceed)
	nb := receiveLease(t, got[1], "the waiter to get the second name, whose release rang before its watcher waited")
	defer nb.Release(ctx)
	if err := ls[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	nc := receiveLease(t, got[2], "the waiter to get the third name")
	defer nc.Release(ctx)
}
