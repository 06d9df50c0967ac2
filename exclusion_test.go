package pglease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// Many goroutines across several clients hammer one name. A shared counter
// proves that no two critical sections overlap, and tokens are observed in
// strictly increasing order.
func TestManyClientsMutualExclusionAndTokenOrder(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"Plain", nil}, {"FastFailover", []Option{WithFastFailover()}}} {
		t.Run(mode.name, func(t *testing.T) { hammer(t, mode.opts) })
	}
}

func hammer(t *testing.T, opts []Option) {
	ctx := testCtx(t)
	first := testClient(t, Config{})
	clients := []*Client{first}
	for i := 0; i < 3; i++ {
		clients = append(clients, testClient(t, Config{Table: first.cfg.Table}))
	}
	var inside atomic.Int32
	var mu sync.Mutex
	var lastToken int64
	var sections atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for _, c := range clients {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 8; i++ {
					l, err := c.Acquire(ctx, "counter", append([]Option{WithTTL(5 * time.Second)}, opts...)...)
					if err != nil {
						errs <- err
						return
					}
					if n := inside.Add(1); n != 1 {
						errs <- errors.New("two holders inside the critical section")
					}
					mu.Lock()
					if l.Token() <= lastToken {
						errs <- errors.New("token went backwards")
					}
					lastToken = l.Token()
					mu.Unlock()
					sections.Add(1)
					inside.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := sections.Load(); got != 4*4*8 {
		t.Fatalf("%d critical sections, want %d", got, 4*4*8)
	}
}

func TestWithinClientNoReentry(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, "x")
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.Token != l.Token() {
		t.Fatalf("second TryAcquire in the same client: %v, want HeldError with our token", err)
	}
	got := make(chan *Lease)
	go func() {
		l2, err := c.Acquire(ctx, "x")
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	select {
	case <-got:
		t.Fatal("Acquire of a name held by the same client returned before release")
	case <-time.After(200 * time.Millisecond):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil || l2.Token() <= l.Token() {
		t.Fatalf("local waiter got %v", l2)
	}
	_ = l2.Release(ctx)
}

func TestAcquireCancellationContract(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"name", nil},
		{"slots", []Option{WithSlots(2)}},
		{"fast-failover", []Option{WithFastFailover()}},
		{"fast-failover-slots", []Option{WithFastFailover(), WithSlots(2)}},
	} {
		t.Run(mode.name, func(t *testing.T) { acquireCancellationContract(t, mode.opts) })
	}
}

// acquireCancellationContract checks one acquisition mode: the same loop
// serves names and semaphores, plain and fast-failover leases.
func acquireCancellationContract(t *testing.T, opts []Option) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table})
	slots := 1
	o, err := a.leaseOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	if o.slots > 1 {
		slots = o.slots
	}
	for range slots {
		l, err := a.TryAcquire(ctx, "busy", append(opts, WithTTL(30*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = b.Acquire(wctx, "busy", opts...)
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire after timeout: %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.Owner != a.Owner() {
		t.Fatalf("error does not carry the holder: %v", err)
	}
	// An already-cancelled context leaves nothing behind.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := b.TryAcquire(cctx, "fresh", opts...); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire with cancelled ctx: %v", err)
	}
	// The statement may still run detached; if it acquired it releases by token.
	deadline := time.Now().Add(5 * time.Second)
	for {
		infos, err := a.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		left := 0
		for _, info := range infos {
			if strings.HasPrefix(info.Name, "fresh") && info.Held() {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cancelled attempt left %d held rows behind: %+v", left, infos)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The lease outlives the context of the call that acquired it.
func TestLeaseOutlivesAcquireContext(t *testing.T) {
	c := testClient(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	l, err := c.Acquire(ctx, "long", WithTTL(time.Second))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // more than 2 TTLs: renewals must keep it
	if err := l.Err(); err != nil {
		t.Fatalf("lease ended with its acquire context: %v", err)
	}
	info, err := c.Get(context.Background(), "long")
	if err != nil || info.Token != l.Token() || !info.Held() {
		t.Fatalf("row %+v %v", info, err)
	}
	_ = l.Release(context.Background())
}

func TestTakeoverAndForceReleaseDetectedAtNextRenewal(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	admin := testClient(t, Config{Table: a.cfg.Table})
	l, err := a.TryAcquire(ctx, "job", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	info, err := admin.ForceRelease(ctx, "job")
	if err != nil || info.Token != l.Token() || info.Owner != a.Owner() {
		t.Fatalf("ForceRelease = %+v, %v", info, err)
	}
	l2, err := admin.TryAcquire(ctx, "job", WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("holder did not learn of the force-release")
	}
	if !errors.Is(l.Err(), ErrLeaseLost) || errors.Is(l.Err(), ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost and not ErrSessionLost", l.Err())
	}
	// A stale holder's release must not touch the new holder's row.
	_ = l.Release(ctx)
	if info, err := admin.Get(ctx, "job"); err != nil || info.Token != l2.Token() {
		t.Fatalf("new holder's row changed: %+v %v", info, err)
	}
	if _, err := admin.ForceRelease(ctx, "nope"); !errors.Is(err, ErrNoLease) {
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
	holder, proxy := proxiedClient(t, Config{})
	waiter := testClient(t, Config{Table: holder.cfg.Table})
	const ttl = 2 * time.Second
	opts = append(opts, WithTTL(ttl))
	l, err := holder.TryAcquire(ctx, "p", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := holder.leaseOptions(opts); o.session && !l.SessionBound() {
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
	waitContended(t, waiter, "p")
	time.Sleep(ttl / 2) // let a renewal or two through
	proxy.Blackhole(true)
	defer proxy.Blackhole(false)
	deadline := l.Deadline()
	<-l.Done()
	lostAt := time.Now()
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("Err = %v", l.Err())
	}
	if late := lostAt.Sub(deadline); late > 250*time.Millisecond {
		t.Fatalf("loss reported %s after the local deadline", late)
	}
	if at, ok := <-acquired; ok && !at.After(lostAt) {
		t.Fatalf("the waiter acquired at %v, before the holder noticed the loss at %v", at, lostAt)
	}
}

// The dedicated connection keeps renewals going when the application
// saturates the pool it shares with pglease.
func TestRenewalSurvivesSaturatedSharedPool(t *testing.T) {
	ctx := testCtx(t)
	pool := pgtest.Pool(t)
	c, err := NewFromPool(pool, Config{Table: pgtest.Schema(t) + ".leases"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "busy-app", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Take every connection of the shared pool for 3 TTLs.
	var conns []interface{ Release() }
	for i := int32(0); i < pool.Config().MaxConns; i++ {
		pc, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, pc)
	}
	time.Sleep(3 * time.Second)
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while the pool was saturated: %v", err)
	}
	for _, pc := range conns {
		pc.Release()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Killing the client's connections with pg_terminate_backend: the
// dedicated connection reconnects and renewals continue.
func TestTerminatedBackendsReconnect(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "terminate-me"})
	l, err := c.TryAcquire(ctx, "t", WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		pgtest.TerminateBackends(t, "pglease terminate-me%")
		time.Sleep(700 * time.Millisecond)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("plain lease lost after backend kills: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	_ = l.Release(ctx)
}

func TestTokensIncreaseAcrossServerRestart(t *testing.T) {
	cl := pgtest.RequireCluster(t)
	ctx := testCtx(t)
	c := testClient(t, Config{})
	var last int64
	for _, mode := range []string{"fast", "immediate"} {
		l, err := c.TryAcquire(ctx, "r", WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d not above %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Cleanup(ctx); err != nil || n != 0 {
			t.Fatalf("Cleanup = %d, %v", n, err)
		}
		if err := cl.Restart(ctx, mode); err != nil {
			t.Fatal(err)
		}
		// The pool reconnects; retry through the restart window. Acquire,
		// not TryAcquire: a release is not flushed before it returns, so a
		// crash (immediate restart) may bring the row back until it expires.
		for i := 0; ; i++ {
			l, err = c.Acquire(ctx, "r", WithTTL(time.Second))
			if err == nil || !IsRetryable(err) || i > 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("after %s restart: %v", mode, err)
		}
		if l.Token() <= last {
			t.Fatalf("after %s restart token %d not above %d", mode, l.Token(), last)
		}
		last = l.Token()
		_ = l.Release(ctx)
	}
}

func TestMinHoldKeepsLeaseUntilThen(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table})
	l, err := a.TryAcquire(ctx, "cron", WithTTL(5*time.Second), WithMinHold(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "cron"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("acquired before the minimum hold passed: %v", err)
	}
	l2, err := b.Acquire(ctx, "cron")
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := b.Get(ctx, "cron"); info.Token != l2.Token() {
		t.Fatalf("row token %d", info.Token)
	}
	_ = l2.Release(ctx)
}

func TestCloseReleasesLeases(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table})
	l, err := a.TryAcquire(ctx, "c", WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), ErrClosed) {
		t.Fatalf("Err = %v, want ErrClosed", l.Err())
	}
	if _, err := a.TryAcquire(ctx, "c"); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryAcquire on closed client: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "c"); err != nil {
		t.Fatalf("lease not released by Close: %v", err)
	}
}

// An acquisition whose reply arrives after the lease's safety deadline is
// not handed out: the row is released by token, the error is retryable,
// and the name is free again in this client and on the server.
func TestLateAcquireReplyIsNotHandedOut(t *testing.T) {
	ctx := testCtx(t)
	c, proxy := proxiedClient(t, Config{})
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(600 * time.Millisecond) // round trip ≥ 1.2 s > TTL − margin
	_, err := c.TryAcquire(ctx, "late", WithTTL(time.Second))
	if err == nil || !IsRetryable(err) {
		t.Fatalf("late TryAcquire = %v, want a retryable error", err)
	}
	proxy.SetDelay(0)
	l, err := c.TryAcquire(ctx, "late", WithTTL(time.Second))
	if err != nil {
		t.Fatalf("TryAcquire after a late reply: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A row this client wrote in an acquisition whose reply was lost (here
// written directly) is recognised by the client's id and freed; a row of
// another client with the same owner label is not.
func TestOrphanedRowOfThisClientIsFreed(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "shared-label"})
	other := testClient(t, Config{Table: c.cfg.Table, Owner: "shared-label"})
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	table := c.st.Names.QualifiedTable()
	insert := `INSERT INTO ` + table + ` (name, owner, token, acquired_at, renewed_at, expires_at, hold_until, ttl, metadata)
		VALUES ($1, 'shared-label', nextval('` + c.st.Names.QualifiedSeq() + `'), now(), now(), now() + interval '1 hour', now(), interval '1 hour', jsonb_build_object('client', $2::text))`
	query(t, insert, []any{"mine", c.id})
	query(t, insert, []any{"theirs", other.id})

	l, err := c.TryAcquire(ctx, "mine")
	if err != nil {
		t.Fatalf("TryAcquire over this client's orphaned row: %v", err)
	}
	_ = l.Release(ctx)
	if _, err := c.TryAcquire(ctx, "theirs"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryAcquire over another client's row with the same owner: %v", err)
	}
	// A row kept for its minimum hold is not an orphan either.
	l, err = c.TryAcquire(ctx, "held-min", WithMinHold(time.Minute), WithTTL(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if _, err := c.TryAcquire(ctx, "held-min"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryAcquire during this client's own minimum hold: %v", err)
	}
}
