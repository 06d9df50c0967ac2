package pglease

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// Fast failover in every topology of holders and waiters: when
// a session-bound holder's session ends, a fast-failover waiter takes the
// name over at once, however the holder got it and however many clients
// wait. The waiters' fallback poll is an hour and the TTL a minute, so a
// take-over within the tests' patience is the session's end noticed, not a
// poll or an expiry.

// ffOpts are the options of every lease of these tests.
var ffOpts = []Option{WithFastFailover(), WithTTL(time.Minute)}

// waitFor starts c.Acquire(name) and returns where its outcome arrives.
func waitFor(ctx context.Context, c *Client, name string, opts ...Option) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		l, err := c.Acquire(ctx, name, opts...)
		ch <- outcome{l, err}
	}()
	return ch
}

type outcome struct {
	l   *Lease
	err error
}

// receiveLease waits for an Acquire started by waitFor and fails the test
// unless it acquired.
func receiveLease(t *testing.T, ch <-chan outcome, what string) *Lease {
	t.Helper()
	a := pgtest.Receive(t, ch, what)
	if a.err != nil {
		t.Fatalf("%s: %v", what, a.err)
	}
	return a.l
}

// endSession ends the database session that holds l's session lock, as
// the holder process's death would.
func endSession(t *testing.T, l *Lease) {
	t.Helper()
	n := pgtest.Value[int](t, `SELECT count(*) FILTER (WHERE pg_terminate_backend("session_pid")) FROM `+
		l.c.st.Names.QualifiedTable()+` WHERE "name" = $1 AND "token" = $2`, l.Name(), l.Token())
	if n != 1 {
		t.Fatalf("no session-bound row of %q with token %d", l.Name(), l.Token())
	}
}

// ffClients returns n clients of one table, none polling. A failing test
// logs the table's rows and queue, and which client each id is.
func ffClients(t *testing.T, n int) []*Client {
	cfg := Config{PollInterval: time.Hour}
	cs := make([]*Client, n)
	for i := range cs {
		cs[i] = testClient(t, cfg)
		cfg.Table = cs[0].cfg.Table
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i, c := range cs {
			t.Logf("client %d is %s", i, c.id)
		}
		t.Logf("rows: %s", pgtest.Value[string](t, `SELECT coalesce(jsonb_agg(to_jsonb(l) - 'metadata' || jsonb_build_object('client', l."metadata" ->> 'client', 'live', l."expires_at" > now())), '[]')::text FROM `+cs[0].st.Names.QualifiedTable()+` AS l`))
		t.Logf("queue: %s", pgtest.Value[string](t, `SELECT coalesce(jsonb_agg(w ORDER BY w."since"), '[]')::text FROM `+cs[0].st.Names.QualifiedWaiters()+` AS w`))
	})
	return cs
}

// A holder that got the name by hand-off from a release, while another
// client also waited, dies: the other waiter takes over at once (it used
// to wait for its next poll: it was queued behind the first waiter when the
// hand-off happened, and nothing told it about the new holder).
func TestFastFailoverAfterAHandOff(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	a, b, c := cs[0], cs[1], cs[2]
	la, err := a.TryAcquire(ctx, "ff", ffOpts...)
	if err != nil {
		t.Fatal(err)
	}
	gotB := waitFor(ctx, b, "ff", ffOpts...)
	waitQueued(t, a, b, "ff")
	gotC := waitFor(ctx, c, "ff", ffOpts...)
	waitQueued(t, a, c, "ff")
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := receiveLease(t, gotB, "the first waiter to get the name by hand-off")
	endSession(t, lb)
	lc := receiveLease(t, gotC, "the second waiter to take over when the new holder's session ended")
	if lc.Token() <= lb.Token() || !lc.session {
		t.Fatalf("token %d after %d, session-bound %v", lc.Token(), lb.Token(), lc.session)
	}
	_ = lc.Release(ctx)
}

// A chain of hand-offs and deaths down a queue of waiting clients: each
// holder, however it got the name (first acquisition, release, take-over
// from a dead holder), is replaced at once when its session ends, by the
// next waiter in the queue.
func TestFastFailoverDownAQueueOfClients(t *testing.T) {
	ctx := testCtx(t)
	const n = 5
	cs := ffClients(t, n)
	l, err := cs[0].TryAcquire(ctx, "ff", ffOpts...)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]<-chan outcome, n)
	for i := 1; i < n; i++ {
		got[i] = waitFor(ctx, cs[i], "ff", ffOpts...)
		waitQueued(t, cs[0], cs[i], "ff")
	}
	for i := 1; i < n; i++ {
		how := "release"
		if i%2 == 1 {
			how = "session end"
			endSession(t, l)
		} else if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next := receiveLease(t, got[i], fmt.Sprintf("waiter %d to take over after the %s of holder %d", i, how, i-1))
		if next.Token() <= l.Token() {
			t.Fatalf("waiter %d: token %d after %d", i, next.Token(), l.Token())
		}
		l = next
	}
	_ = l.Release(ctx)
}

// A holder that took the name over at its expiry (its previous holder
// stopped renewing), with another client waiting behind, dies: the other
// takes over at once.
func TestFastFailoverAfterAnExpiryTakeover(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	a, b, c := cs[0], cs[1], cs[2]
	if _, err := a.TryAcquire(ctx, "ff", WithTTL(time.Minute)); err != nil { // plain
		t.Fatal(err)
	}
	gotB := waitFor(ctx, b, "ff", ffOpts...)
	waitQueued(t, a, b, "ff")
	gotC := waitFor(ctx, c, "ff", ffOpts...)
	waitQueued(t, a, c, "ff")
	// The holder stops renewing: its row expires with no release to
	// notify. The first waiter's expiry timer is a minute away, so wake
	// it as its timer would.
	rows(t, a).SetExpiry("ff", -time.Second)
	b.wake.hub.notify("ff", true)
	lb := receiveLease(t, gotB, "the first waiter to take the expired lease over")
	endSession(t, lb)
	lc := receiveLease(t, gotC, "the second waiter to take over when the new holder's session ended")
	if lc.Token() <= lb.Token() {
		t.Fatalf("token %d after %d", lc.Token(), lb.Token())
	}
	_ = lc.Release(ctx)
}

// A holder that got the name when the previous one stepped down, with
// another client waiting behind, dies: the other takes over at once.
func TestFastFailoverAfterAStepDown(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	a, b, c := cs[0], cs[1], cs[2]
	la, err := a.TryAcquire(ctx, "ff", ffOpts...)
	if err != nil {
		t.Fatal(err)
	}
	gotB := waitFor(ctx, b, "ff", ffOpts...)
	waitQueued(t, a, b, "ff")
	gotC := waitFor(ctx, c, "ff", ffOpts...)
	waitQueued(t, a, c, "ff")
	if err := c.RequestStepDown(ctx, "ff"); err != nil {
		t.Fatal(err)
	}
	pgtest.Receive(t, la.StepDownRequested(), "the holder to hear the step-down request")
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := receiveLease(t, gotB, "the first waiter to get the name after the step-down")
	endSession(t, lb)
	lc := receiveLease(t, gotC, "the second waiter to take over when the new holder's session ended")
	if lc.Token() <= lb.Token() {
		t.Fatalf("token %d after %d", lc.Token(), lb.Token())
	}
	_ = lc.Release(ctx)
}

// Several goroutines of each of two waiting clients: when the holder that
// got the name by hand-off dies, a waiter takes over at once (one of the
// other client's, or, once the dead holder's client has freed the row, one
// of its own, which may take a name its client released in a burst), and
// every waiter gets the name in turn.
func TestFastFailoverAfterAHandOffWithManyWaitersPerClient(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	a, b, c := cs[0], cs[1], cs[2]
	la, err := a.TryAcquire(ctx, "ff", ffOpts...)
	if err != nil {
		t.Fatal(err)
	}
	const per = 3
	gotB, gotC := make(chan outcome, per), make(chan outcome, per)
	for range per {
		go func() { l, err := b.Acquire(ctx, "ff", ffOpts...); gotB <- outcome{l, err} }()
	}
	waitQueued(t, a, b, "ff")
	waitSubscribed(t, b, "ff", per)
	for range per {
		go func() { l, err := c.Acquire(ctx, "ff", ffOpts...); gotC <- outcome{l, err} }()
	}
	waitQueued(t, a, c, "ff")
	waitSubscribed(t, c, "ff", per)
	next := func(what string) *Lease {
		t.Helper()
		var o outcome
		select {
		case o = <-gotB:
		case o = <-gotC:
		case <-time.After(patience):
			t.Fatalf("timed out after %s waiting for %s", patience, what)
		}
		if o.err != nil {
			t.Fatalf("%s: %v", what, o.err)
		}
		return o.l
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := receiveLease(t, gotB, "a waiter of the first client to get the name by hand-off")
	endSession(t, lb)
	last := next("a waiter to take over when the holder's session ended")
	if last.Token() <= lb.Token() {
		t.Fatalf("token %d after %d", last.Token(), lb.Token())
	}
	// The rest get it in turn, by release.
	for i := range 2*per - 2 {
		if err := last.Release(ctx); err != nil {
			t.Fatal(err)
		}
		last = next(fmt.Sprintf("waiter %d of the rest to get the name after a release", i))
	}
	_ = last.Release(ctx)
}

// Slots: a slot handed on by a release to one of two waiting clients; when
// its new holder's session ends, the other waiter takes it over at once.
func TestFastFailoverOfASlotAfterAHandOff(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	a, b, c := cs[0], cs[1], cs[2]
	opts := append([]Option{WithSlots(2)}, ffOpts...)
	la, err := a.TryAcquire(ctx, "sem", opts...)
	if err != nil {
		t.Fatal(err)
	}
	other := testClient(t, Config{Table: a.cfg.Table})
	if _, err := other.TryAcquire(ctx, "sem", opts...); err != nil {
		t.Fatal(err)
	}
	gotB := waitFor(ctx, b, "sem", opts...)
	gotC := waitFor(ctx, c, "sem", opts...)
	waitSubscribed(t, b, "sem#0", 1)
	waitSubscribed(t, c, "sem#0", 1)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var first *Lease
	var rest <-chan outcome
	select {
	case o := <-gotB:
		first, rest, err = o.l, gotC, o.err
	case o := <-gotC:
		first, rest, err = o.l, gotB, o.err
	case <-time.After(patience):
		t.Fatal("no waiter got the released slot")
	}
	if err != nil {
		t.Fatal(err)
	}
	endSession(t, first)
	l := receiveLease(t, rest, "the other waiter to take the slot over when its new holder's session ended")
	if l.Name() != first.Name() || l.Token() <= first.Token() {
		t.Fatalf("took %s token %d after %s token %d", l.Name(), l.Token(), first.Name(), first.Token())
	}
	_ = l.Release(ctx)
}

// A holder whose session ended while its client lives opens another
// session at once, which rings a bell of its own; a waiter whose watcher
// begins to watch that client's doorbell only then must not wait for the
// new session to ring (the lease is the old session's): it looks again
// once its watcher is armed, and takes over at once. (A watcher of the
// holder's session once waited on the holder's client lock, which the new
// session holds, until the fallback poll.)
func TestWatcherStartingAfterTheHoldersClientReconnectedTakesOver(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 2)
	h, w := cs[0], cs[1]
	l := mustTry(t, h, "ff")
	armed, proceed := make(chan string, 1), make(chan struct{})
	hook := func(holder string) {
		select {
		case armed <- holder:
			<-proceed
		default:
		}
	}
	testHookBell.Store(&hook)
	t.Cleanup(func() { testHookBell.Store(nil) })
	got := waitFor(ctx, w, "ff", ffOpts...)
	if holder := pgtest.Receive(t, armed, "the waiter to start watching the holder's doorbell"); holder != h.id {
		t.Fatalf("watching client %s's doorbell, the holder is %s", holder, h.id)
	}
	epoch := h.conn.sess.Load().currentEpoch()
	endSession(t, l)
	pgtest.WaitFor(t, patience, "the holder's client to open a new session", func() bool {
		s, err := h.session()
		return err == nil && s.isLive() && h.conn.sess.Load().currentEpoch() != epoch
	})
	close(proceed)
	nl := receiveLease(t, got, "the waiter to take over (its poll is an hour, the TTL a minute)")
	if nl.Token() <= l.Token() {
		t.Fatalf("token %d after %d", nl.Token(), l.Token())
	}
}

// A plain waiter takes a dead fast-failover holder's lease over at once
// too, and so does not keep a fast-failover waiter queued behind it
// waiting for the expiry (it used to: only a fast-failover attempt could
// take a session-bound row over early, and the queue kept the one behind
// from it).
func TestAPlainWaiterTakesOverFromADeadFastFailoverHolder(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	a, b, c := cs[0], cs[1], cs[2]
	la, err := a.TryAcquire(ctx, "ff", ffOpts...)
	if err != nil {
		t.Fatal(err)
	}
	gotB := waitFor(ctx, b, "ff", WithTTL(time.Minute))
	waitQueued(t, a, b, "ff")
	gotC := waitFor(ctx, c, "ff", ffOpts...)
	waitQueued(t, a, c, "ff")
	endSession(t, la)
	lb := receiveLease(t, gotB, "the plain waiter, first in the queue, to take over when the holder's session ended")
	if lb.Token() <= la.Token() || lb.session {
		t.Fatalf("token %d after %d, session-bound %v", lb.Token(), la.Token(), lb.session)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lc := receiveLease(t, gotC, "the fast-failover waiter, by hand-off")
	_ = lc.Release(ctx)
}

// A holder whose session lives on but that stopped renewing (a paused
// process) loses its lease at expiry; the waiter that takes it over then
// holds a lease bound to its own session at once, so that its death is
// noticed at once too. (It used to get a lease not bound to its session,
// never bound later: the old holder's session kept a lock of the name.)
func TestFastFailoverAfterAnExpiryTakeoverFromALiveSession(t *testing.T) {
	ctx := testCtx(t)
	cs := ffClients(t, 3)
	a, b, c := cs[0], cs[1], cs[2]
	if err := a.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	// The paused holder: a session that holds a session-bound row and its
	// session lock, and renews nothing.
	paused, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Close(context.Background())
	q := store.Pgx(paused)
	if err := a.st.SessionLock(ctx, q); err != nil {
		t.Fatal(err)
	}
	r, err := a.st.Acquire(ctx, q, store.AcquireArgs{Name: "ff", Owner: "paused", TTL: time.Second, Session: true, Client: "paused"})
	if err != nil || !r.Acquired || !r.SessionBound {
		t.Fatalf("the paused holder's acquisition: %+v, %v", r, err)
	}
	gotB := waitFor(ctx, b, "ff", ffOpts...)
	lb := receiveLease(t, gotB, "the waiter to take the expired lease over")
	if lb.Token() <= r.Token || !lb.session {
		t.Fatalf("token %d after %d, session-bound %v", lb.Token(), r.Token, lb.session)
	}
	gotC := waitFor(ctx, c, "ff", ffOpts...)
	waitQueued(t, b, c, "ff")
	endSession(t, lb)
	lc := receiveLease(t, gotC, "the next waiter to take over when the new holder's session ended")
	if lc.Token() <= lb.Token() || !lc.session {
		t.Fatalf("token %d after %d, session-bound %v", lc.Token(), lb.Token(), lc.session)
	}
	_ = lc.Release(ctx)
}

// secondWaiterBehindANode runs a process (a node) in which one client holds
// "ff" with fast failover (TTL a minute) and another waits for it, first in
// line, and a client of this process that waits second, until it watches
// a doorbell (the first waiter's) or the holder's session. It returns that
// client, the node, the holder's token and where the second waiter's
// outcome arrives.
func secondWaiterBehindANode(t *testing.T) (*Client, *exec.Cmd, int64, <-chan outcome) {
	t.Helper()
	ctx := testCtx(t)
	c := ffClients(t, 1)[0]
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	node, token := startHolderEnv(t, c.cfg.Table, "ff", time.Minute, "PGLEASE_TEST_FAST=1", "PGLEASE_TEST_FIRST_WAITER=1")
	got := waitFor(ctx, c, "ff", ffOpts...)
	waitQueued(t, c, c, "ff")
	// It watches the first waiter's bell (which the first waiter's session
	// frees as it ends), or, should it listen, the holder's session.
	pgtest.WaitFor(t, patience, "the second waiter to watch a doorbell or the holder's session", func() bool {
		if anyBellArmed(c) {
			return true
		}
		c.wake.mu.Lock()
		defer c.wake.mu.Unlock()
		return len(c.wake.watchers) > 0
	})
	return c, node, token, got
}

// The holder and the first waiter die together (one node: one process,
// SIGKILLed): the second waiter takes over at once. It used to wait for its
// fallback poll: queued behind the first, it watched no session, and the
// name was promised to a waiter that was gone.
func TestFastFailoverWhenTheHolderAndTheFirstWaiterDieTogether(t *testing.T) {
	ctx := testCtx(t)
	_, node, token, got := secondWaiterBehindANode(t)
	killed := time.Now()
	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l := receiveLease(t, got, "the second waiter to take over when the holder and the first waiter died (the TTL is a minute, the poll an hour)")
	if l.Token() <= token || !l.session {
		t.Fatalf("token %d (holder had %d), session-bound %v", l.Token(), token, l.session)
	}
	t.Logf("kill → acquired in %s", time.Since(killed))
	_ = l.Release(ctx)
}

// The first waiter dies a moment after the holder, before it took the name
// over (here: the process running both is stopped, the holder's session
// ended, and then the process killed): the second waiter takes over at
// once (it watches the first waiter's bell, which the first's session
// frees as it ends). It used to wait for its fallback poll, and then,
// watching the holder's bell, to find the name promised to the first
// waiter and look again within about a second of the first's death.
func TestFastFailoverWhenTheFirstWaiterDiesJustAfterTheHolder(t *testing.T) {
	ctx := testCtx(t)
	c, node, _, got := secondWaiterBehindANode(t)
	if err := node.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Process.Signal(syscall.SIGCONT) })
	pid := pgtest.Value[int](t, `SELECT "session_pid" FROM `+c.st.Names.QualifiedTable()+` WHERE "name" = 'ff'`)
	if !pgtest.Value[bool](t, `SELECT pg_terminate_backend($1)`, pid) {
		t.Fatal("the holder's session was not ended")
	}
	pgtest.WaitFor(t, patience, "the holder's session to end", func() bool {
		return !pgtest.Value[bool](t, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid)
	})
	killed := time.Now()
	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l := receiveLease(t, got, "the second waiter to take over when the first died (the TTL is a minute, the poll an hour)")
	t.Logf("first waiter's kill → acquired in %s", time.Since(killed))
	_ = l.Release(ctx)
}
