package pglease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// A holder learns at its next renewal, not at its deadline, that its row
// was force-released and taken over; its stale release leaves the new
// holder's row alone.
func TestTakeoverAndForceReleaseDetectedAtNextRenewal(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	admin := testClient(t, Config{Table: a.cfg.Table})
	l, err := a.TryAcquire(ctx, "job", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	info, err := admin.forceRelease(ctx, "job")
	if err != nil || info.Token != l.Token() || info.Owner != a.Owner() {
		t.Fatalf("ForceRelease = %+v, %v", info, err)
	}
	l2, err := admin.TryAcquire(ctx, "job", WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Receive(t, l.Context().Done(), "the holder to learn of the force-release")
	if !errors.Is(causeOf(l.Context()), ErrLeaseLost) || errors.Is(causeOf(l.Context()), ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost and not ErrSessionLost", causeOf(l.Context()))
	}
	if !strings.Contains(causeOf(l.Context()).Error(), "taken over") {
		t.Fatalf("Err = %v, want the renewal's finding, not the deadline's", causeOf(l.Context()))
	}
	// A stale holder's release must not touch the new holder's row.
	_ = l.Release(ctx)
	if info, err := admin.Get(ctx, "job"); err != nil || info.Token != l2.Token() {
		t.Fatalf("new holder's row changed: %+v %v", info, err)
	}
	if _, err := admin.forceRelease(ctx, "nope"); !errors.Is(err, ErrNoLease) {
		t.Fatalf("ForceRelease of a missing name: %v", err)
	}
}

// Renewals blocked by a partition: the holder reports the loss no later than
// its local deadline and before anyone else acquires.
func TestBlockedRenewalsLoseBeforeAnotherAcquires(t *testing.T) {
	partitionedHolderLosesFirst(t)
}

// partitionedHolderLosesFirst partitions a holder from the server while a
// waiter of another client waits: the holder must report the loss no later
// than its local deadline, and before the waiter acquires.
func partitionedHolderLosesFirst(t *testing.T, opts ...Option) {
	ctx := testCtx(t)
	holderLog, waiterLog := newEventLog(), newEventLog()
	holder, proxy := proxiedClient(t, Config{Observer: holderLog})
	waiter := testClient(t, Config{Table: holder.cfg.Table, Observer: waiterLog})
	const ttl = 2 * time.Second
	opts = append(opts, WithTTL(ttl))
	l, err := holder.TryAcquire(ctx, "p", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := holder.leaseOptions(entryAcquire, opts); o.session && !l.session {
		t.Fatal("lease not session-bound")
	}
	acquired := make(chan time.Time, 1)
	go func() {
		l2, err := waiter.Acquire(ctx, "p", opts...)
		if err != nil {
			t.Error(err)
			close(acquired)
			return
		}
		acquired <- time.Now()
		_ = l2.Release(context.Background())
	}()
	waiterLog.await(t, "the waiter to find the name held", is(EventContended, "p"))
	holderLog.await(t, "a renewal while the waiter waits", is(EventRenewed, "p"))
	proxy.Blackhole(true)
	defer proxy.Blackhole(false)
	deadline := l.Deadline()
	pgtest.Receive(t, l.Context().Done(), "the partitioned holder to lose its lease")
	lostAt := time.Now()
	if !errors.Is(causeOf(l.Context()), ErrLeaseLost) {
		t.Fatalf("Err = %v", causeOf(l.Context()))
	}
	// Generous: the deadline timer fires within milliseconds, but under
	// -race on two cores a goroutine can wait long to run. The order
	// below is the safety property.
	if late := lostAt.Sub(deadline); late > time.Second {
		t.Fatalf("loss reported %s after the local deadline", late)
	}
	select {
	case at, ok := <-acquired:
		if ok && !at.After(lostAt) {
			t.Fatalf("the waiter acquired at %v, before the holder noticed the loss at %v", at, lostAt)
		}
	case <-time.After(patience):
		t.Fatal("the waiter did not acquire after the holder lost the lease")
	}
}

// SlowSuccessfulRenewDoesNotExtendTrust: the deadline is computed from when
// a renewal was sent, however late its reply arrives.
func TestSlowSuccessfulRenewDoesNotExtendTrust(t *testing.T) {
	ctx := testCtx(t)
	c, proxy := proxiedClient(t, Config{})
	const ttl = 5 * time.Second
	l, err := c.TryAcquire(ctx, "slow", WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(400 * time.Millisecond)
	sent := time.Now()
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(sent); rtt < 400*time.Millisecond {
		t.Fatalf("proxy delay not in effect: %s", rtt)
	}
	// The reply took at least the proxy's delay to come back, so the
	// statement was sent at least that long before Renew returned. Trust
	// computed from the reply would end later than this bound.
	returned := time.Now()
	if max := returned.Add(-400*time.Millisecond + ttl - c.margin(ttl)); l.Deadline().After(max) {
		t.Fatalf("deadline %s after the reply; the bound from the send time is %s", l.Deadline().Sub(returned), max.Sub(returned))
	}
	proxy.SetDelay(0)
	_ = l.Release(ctx)
}

// One guarded transaction holding its lease's row does not stall the
// renewal of the client's other leases.
func TestGuardDoesNotStallOtherRenewals(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	guarded, err := c.TryAcquire(ctx, "g", WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.TryAcquire(ctx, "o", WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	d0 := other.Deadline()
	pool := c.db
	err = pool.InTx(ctx, func(q store.Querier) error {
		if err := guarded.guard(ctx, q); err != nil {
			return err
		}
		// Not t.Fatal: the transaction must end for the test to end.
		if !pgtest.Eventually(patience, func() bool { return other.Deadline().After(d0) }) {
			t.Error("the other lease was not renewed while one row was guarded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := causeOf(other.Context()); err != nil { // renewed in time, or ended at its deadline
		t.Fatalf("the other lease: %v", err)
	}
	_ = guarded.Release(ctx)
}

// A short-TTL lease acquired while a long-TTL lease is held is renewed on
// its own schedule: one batch, but due at the earliest lease's time.
func TestShortLeaseRenewedBesideLongLease(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	long, err := c.TryAcquire(ctx, "long", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer long.Release(ctx)
	pgtest.WaitFor(t, patience, "the renew loop to settle on the long lease", func() bool {
		c.renewer.mu.Lock()
		defer c.renewer.mu.Unlock()
		return !c.renewer.nextDue.IsZero()
	})
	short, err := c.TryAcquire(ctx, "short", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer short.Release(ctx)
	awaitKeptPast(t, log, short, short.Deadline())
}
