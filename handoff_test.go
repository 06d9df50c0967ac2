package pglease

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// A waiter is woken by the release notification, not by polling: the
// fallback poll and the holder's remaining time are both far longer than the
// test allows.
func TestWaiterWakesOnReleaseWithoutPolling(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table, PollInterval: time.Hour})
	l, err := a.TryAcquire(ctx, "n", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l2, err := b.Acquire(ctx, "n")
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitContended(t, b, "n")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-got:
		if l2 == nil || l2.Token() <= l.Token() {
			t.Fatalf("waiter got %v", l2)
		}
		_ = l2.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter was not woken by the release notification")
	}
}

// waitContended waits until c has seen name held at least once.
func waitContended(t *testing.T, c *Client, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.hub.mu.Lock()
		n := len(c.hub.subs[name])
		c.hub.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("waiter never subscribed")
}

// The listener connection is killed while a waiter waits; the client
// reconnects, re-subscribes, and the waiter is still woken by a release.
func TestDroppedListenerIsRecovered(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table, PollInterval: time.Hour, Owner: "listener-victim"})
	l, err := a.TryAcquire(ctx, "n", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l2, _ := b.Acquire(ctx, "n")
		got <- l2
	}()
	waitContended(t, b, "n")
	before := b.sess.currentEpoch()
	for ; before == 0; before = b.sess.currentEpoch() { // the listener is connecting
		time.Sleep(time.Millisecond)
	}
	if n := pgtest.TerminateBackends(t, "pglease listener-victim"); n == 0 {
		t.Fatal("no backend of the waiter's client to terminate")
	}
	deadline := time.Now().Add(10 * time.Second)
	for e := b.sess.currentEpoch(); e == 0 || e == before; e = b.sess.currentEpoch() {
		if time.Now().After(deadline) {
			t.Fatal("listener did not reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitContended(t, b, "n")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-got:
		if l2 == nil {
			t.Fatal("waiter failed")
		}
		_ = l2.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken after the listener reconnected")
	}
}

// A fast-failover holder process is SIGKILLed; the waiter takes over long
// before the TTL would have expired.
func TestFastFailoverAfterHolderSIGKILL(t *testing.T) {
	ctx := testCtx(t)
	const ttl = time.Minute
	c := testClient(t, Config{PollInterval: time.Hour})
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	holder, token := startHolder(t, c.cfg.Table, "ff", ttl, true)
	got := make(chan *Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "ff", WithFastFailover(), WithTTL(ttl))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitContended(t, c, "ff")
	killed := time.Now()
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if l.Token() <= token || !l.SessionBound() {
			t.Fatalf("token %d (holder had %d), session-bound %v", l.Token(), token, l.SessionBound())
		}
		t.Logf("kill → acquired in %s", time.Since(killed))
		_ = l.Release(ctx)
	case <-time.After(ttl / 2):
		t.Fatal("fast failover waited for the TTL")
	}
}

// Without fast failover, a crashed holder's lease is taken over when it
// expires: the waiter's timer fires at the server's remaining time.
func TestPlainFailoverAtExpiry(t *testing.T) {
	ctx := testCtx(t)
	const ttl = 2 * time.Second
	c := testClient(t, Config{PollInterval: time.Hour})
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	holder, token := startHolder(t, c.cfg.Table, "plain", ttl, false)
	got := make(chan *Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "plain", WithTTL(ttl))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitContended(t, c, "plain")
	_ = holder.Process.Signal(syscall.SIGKILL)
	select {
	case l := <-got:
		if l == nil || l.Token() <= token {
			t.Fatalf("got %v", l)
		}
		_ = l.Release(ctx)
	case <-time.After(4 * ttl):
		t.Fatal("waiter did not take over at expiry (the fallback poll is an hour)")
	}
}

// A fast-failover holder behind a partition loses its lease (at its local
// deadline) before the waiter gets it: the server cannot declare the
// session dead earlier.
func TestPartitionedFastFailoverHolderLosesFirst(t *testing.T) {
	partitionedHolderLosesFirst(t, WithFastFailover())
}

// When the server ends a fast-failover holder's session, the holder's
// lease ends at once rather than at its deadline, with ErrSessionLost.
func TestSessionLossEndsSessionBoundLeaseAtOnce(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "session-victim"})
	l, err := c.TryAcquire(ctx, "s", WithFastFailover(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.TryAcquire(ctx, "p", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	pgtest.TerminateBackends(t, "pglease session-victim")
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), ErrLeaseLost) || !errors.Is(l.Err(), ErrSessionLost) {
			t.Fatalf("Err = %v, want ErrLeaseLost and ErrSessionLost", l.Err())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("session-bound lease survived the end of its session")
	}
	if err := plain.Err(); err != nil {
		t.Fatalf("plain lease ended with the session: %v", err)
	}
	// The name is free for a fast-failover contender right away.
	other := testClient(t, Config{Table: c.cfg.Table})
	l2, err := other.Acquire(ctx, "s", WithFastFailover())
	if err != nil {
		t.Fatal(err)
	}
	_ = l2.Release(ctx)
	_ = plain.Release(ctx)
}

// A fast-failover session tells the server not to declare it dead before
// the lease's TTL has passed, and not to end it for idling.
func TestFastFailoverSessionBoundsDeadPeerDetection(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "ka", WithFastFailover(), WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var idle, user, idleSession string
	err = c.sess.do(ctx, time.Second, func(ctx context.Context, q store.Querier, _ *sessState) error {
		return q.Query(ctx, `SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_user_timeout'), current_setting('idle_session_timeout')`, nil,
			func(r store.Row) error { return r.Scan(&idle, &user, &idleSession) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if idle != "10" || user != "20000" || idleSession != "0" {
		t.Fatalf("keepalive idle %q, user timeout %q, idle_session_timeout %q", idle, user, idleSession)
	}
}

// Every connection of the session gets a new epoch, so that leases bound
// to a lost connection never match a later one.
func TestSessionEpochsAreNeverReused(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "epoch-victim"})
	l, err := c.TryAcquire(ctx, "e", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	seen := map[uint64]bool{}
	for i := 0; i < 3; i++ {
		if err := l.Renew(ctx); err != nil { // (re)connects the session
			t.Fatal(err)
		}
		before := c.sess.currentEpoch()
		seen[before] = true
		pgtest.TerminateBackends(t, "pglease epoch-victim")
		deadline := time.Now().Add(10 * time.Second)
		for e := c.sess.currentEpoch(); e == 0 || e == before; e = c.sess.currentEpoch() {
			if seen[e] && e != before && e != 0 {
				t.Fatalf("epoch %d reused", e)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no new connection after terminating epoch %d (now %d)", before, e)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
