package pglease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

func TestTryAcquireRelease(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table})

	l, err := a.TryAcquire(ctx, "job", WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if l.Token() <= 0 {
		t.Fatalf("token %d, want > 0", l.Token())
	}
	_, err = b.TryAcquire(ctx, "job")
	var held *HeldError
	if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &held) {
		t.Fatalf("second TryAcquire: %v, want HeldError", err)
	}
	if held.Holder.Owner != a.Owner() || held.Holder.Token != l.Token() || held.Holder.Remaining <= 0 {
		t.Fatalf("holder = %+v, want owner %q token %d", held.Holder, a.Owner(), l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(l.Err(), ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", l.Err())
	}
	l2, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d not above %d", l2.Token(), l.Token())
	}
}

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

func TestSlotsAllowNHolders(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table})
	var held []*Lease
	names := map[string]bool{}
	for i := 0; i < 3; i++ {
		l, err := a.TryAcquire(ctx, "pool", WithSlots(3))
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		names[l.Name()] = true
		held = append(held, l)
	}
	if len(names) != 3 {
		t.Fatalf("slot names %v", names)
	}
	if _, err := b.TryAcquire(ctx, "pool", WithSlots(3)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("fourth holder: %v", err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "pool", WithSlots(3))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond)
	freed := held[1].Name()
	_ = held[1].Release(ctx)
	select {
	case l := <-got:
		if l == nil || l.Name() != freed {
			t.Fatalf("waiter got %v, want slot %s", l, freed)
		}
		_ = l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("semaphore waiter not woken")
	}
	if _, err := a.TryAcquire(ctx, string(make([]byte, 254)), WithSlots(10)); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("name too long with slot suffix: %v", err)
	}
}

func TestAlertOnOldHeartbeat(t *testing.T) {
	ctx := testCtx(t)
	events := make(chan Event, 16)
	holder := testClient(t, Config{TTL: 3 * time.Hour, RenewInterval: time.Hour, SafetyMargin: time.Second})
	watcher := testClient(t, Config{Table: holder.cfg.Table, AlertAfter: 300 * time.Millisecond,
		Observer: ObserverFunc(func(e Event) {
			if e.Kind == EventAlert {
				events <- e
			}
		})})
	_ = holder
	// RenewInterval one hour is refused with a short TTL; hold with a long
	// TTL so no renewal happens during the test.
	l, err := holder.TryAcquire(ctx, "stuck", WithTTL(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	time.Sleep(400 * time.Millisecond)
	if _, err := watcher.TryAcquire(ctx, "stuck"); !errors.Is(err, ErrNotAcquired) {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Owner != holder.Owner() || e.Age < 300*time.Millisecond {
			t.Fatalf("alert %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no alert")
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
