package pglease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// TryAcquire of a held name names the holder; Release is idempotent, ends
// the lease, and hands the name on with a higher token.
func TestTryAcquireNamesTheHolderAndReleaseHandsTheNameOn(t *testing.T) {
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
	case <-l.Context().Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(causeOf(l.Context()), ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", causeOf(l.Context()))
	}
	l2, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d not above %d", l2.Token(), l.Token())
	}
}

// Many goroutines of several clients take one name in turn. Each holds it
// a while and checks, at entry and again at exit, that no one else is
// inside: a second holder, if exclusion failed, would be inside at the same
// time. Tokens are seen in strictly increasing order.
func TestAtMostOneHolderAtATimeWithIncreasingTokens(t *testing.T) {
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
	for range 3 {
		clients = append(clients, testClient(t, Config{Table: first.cfg.Table}))
	}
	const goroutines, rounds = 4, 8
	var (
		inside   atomic.Pointer[Lease] // the holder in the critical section
		overlaps atomic.Int32
		mu       sync.Mutex
		last     int64 // under mu
		sections atomic.Int32
		wg       sync.WaitGroup
	)
	overlap := func(format string, args ...any) {
		if overlaps.Add(1) <= 3 { // the first few tell the story
			t.Errorf(format, args...)
		}
	}
	for _, c := range clients {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := c.Acquire(ctx, "counter", append([]Option{WithTTL(5 * time.Second)}, opts...)...)
					if err != nil {
						t.Error(err)
						return
					}
					if other := inside.Swap(l); other != nil {
						overlap("token %d entered while token %d was inside", l.Token(), other.Token())
					}
					mu.Lock()
					if l.Token() <= last {
						t.Errorf("token %d after %d", l.Token(), last)
					}
					last = l.Token()
					mu.Unlock()
					// Not a wait: the width of the critical section. Held
					// this long, an overlapping holder is caught inside.
					time.Sleep(5 * time.Millisecond)
					if other := inside.Swap(nil); other != l {
						var tok int64 // 0: none inside
						if other != nil {
							tok = other.Token()
						}
						overlap("token %d found token %d inside when it left", l.Token(), tok)
					}
					sections.Add(1)
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d overlapping critical sections", n)
	}
	if got, want := sections.Load(), int32(len(clients)*goroutines*rounds); got != want {
		t.Fatalf("%d critical sections, want %d", got, want)
	}
}

// Giving up on an acquisition matches both ErrNotAcquired and ctx's error
// and leaves nothing behind: no row, no session lock, no local slot. That
// holds when ctx ends while the attempt's statement is in flight and the
// statement, detached, grants the lease after the caller has gone: attempt
// then releases it by token. The same loop serves names and semaphores,
// plain and fast-failover leases.
func TestGivingUpOnAcquireLeavesNothingBehind(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"Name", nil},
		{"Slots", []Option{WithSlots(2)}},
		{"FastFailover", []Option{WithFastFailover()}},
		{"FastFailoverSlots", []Option{WithFastFailover(), WithSlots(2)}},
	} {
		t.Run(mode.name, func(t *testing.T) { givingUpLeavesNothingBehind(t, mode.opts) })
	}
}

func givingUpLeavesNothingBehind(t *testing.T, opts []Option) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	events := newEventLog()
	b, proxy := proxiedClient(t, Config{Table: a.cfg.Table, Observer: events})
	o, err := a.leaseOptions(entryAcquire, opts)
	if err != nil {
		t.Fatal(err)
	}
	for range max(o.slots, 1) {
		l, err := a.TryAcquire(ctx, "busy", append(opts, WithTTL(30*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}

	// Waiting for a held name until ctx ends: once the wait has found it
	// held (a fixed timeout could end before the first attempt on a slow
	// machine, with no holder seen yet).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { _, err := b.Acquire(wctx, "busy", opts...); got <- err }()
	for range max(o.slots, 1) { // a round of attempts: each slot once
		events.await(t, "the waiter to find the name held", func(e Event) bool {
			return e.Kind == EventContended && strings.HasPrefix(e.Name, "busy")
		})
	}
	cancel()
	err = pgtest.Receive(t, got, "the wait to end with its context")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after its context ended: %v; want ErrNotAcquired and Canceled", err)
	}
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.Owner != a.Owner() {
		t.Fatalf("error does not carry the holder: %v", err)
	}

	// A context that has ended already: no statement starts.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := b.TryAcquire(cctx, "fresh", opts...); !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire with a cancelled ctx: %v; want ErrNotAcquired and Canceled", err)
	}
	if left := rows(t, a).Held("fresh"); len(left) > 0 {
		t.Fatalf("TryAcquire with a cancelled ctx acquired %v", left)
	}

	// A context that ends while the statement is on its way: every chunk
	// b sends or receives is delayed, and ctx ends the moment the first
	// chunk of the attempt leaves b, long before the statement can commit.
	fctx, ended := endInFlight(t, ctx, b, proxy, 300*time.Millisecond, 1)
	if _, err := b.TryAcquire(fctx, "fresh", opts...); !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire whose ctx ended in flight: %v; want ErrNotAcquired and Canceled", err)
	}
	// The statement runs on and grants the lease to no one: attempt
	// releases its row by token, then ends the lease it never handed out.
	l := pgtest.Receive(t, ended, "the lease granted after the caller gave up to be ended")
	proxy.SetDelay(0)
	if left := rows(t, a).Held("fresh"); len(left) > 0 {
		t.Fatalf("the lease granted after the caller gave up (token %d) is still held: %v", l.Token(), left)
	}
	// Nor is the local slot kept, or a fast-failover lease's session lock:
	// another client's lease of the name is bound to its session.
	if l, err := b.TryAcquire(ctx, "fresh", opts...); err != nil {
		t.Fatalf("TryAcquire after the abandoned attempt: %v", err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Observers never heard of the lease nobody was handed: neither its
	// acquisition nor its end (events arrive in order, so every event of
	// the abandoned attempt has come by the release of the next lease).
	events.await(t, "the release of the next lease", func(e Event) bool {
		return e.Kind == EventReleased && strings.HasPrefix(e.Name, "fresh")
	})
	events.mu.Lock()
	for _, e := range events.events {
		if e.Token == l.Token() && (e.Kind == EventAcquired || e.Kind == EventReleased || e.Kind == EventLost) {
			t.Errorf("the abandoned lease (token %d) was reported %s", l.Token(), e.Kind)
		}
	}
	events.mu.Unlock()
	l, err = a.TryAcquire(ctx, "fresh", opts...)
	if err != nil {
		t.Fatalf("another client's TryAcquire after the abandoned attempt: %v", err)
	}
	defer l.Release(ctx)
	if o.session && !l.session {
		t.Fatal("the abandoned attempt kept its session lock: another client's fast-failover lease is not session-bound")
	}
}

// A set whose context ends while its transaction is on its way leaves
// nothing behind, by the single names' path (givingUpLeavesNothingBehind):
// the leases the transaction still grants are built only to be ended once
// their rows are released by token, are never reported, and keep no local
// slot.
func TestAcquireAllWhoseContextEndsInFlightLeavesNothingBehind(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	events := newEventLog()
	b, proxy := proxiedClient(t, Config{Table: a.cfg.Table, Observer: events})
	names := []string{"fresh-a", "fresh-b"}
	warm, err := b.TryAcquireAll(ctx, []string{"warm"}) // the table checked, a pooled connection open
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	fctx, ended := endInFlight(t, ctx, b, proxy, 100*time.Millisecond, len(names))
	if _, err := b.TryAcquireAll(fctx, names); !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquireAll whose ctx ended in flight: %v; want ErrNotAcquired and Canceled", err)
	}
	tokens := map[int64]bool{}
	for range names {
		l := pgtest.Receive(t, ended, "a lease of the set granted after the caller gave up to be ended")
		tokens[l.Token()] = true
	}
	proxy.SetDelay(0)
	for _, name := range names {
		if left := rows(t, a).Held(name); len(left) > 0 {
			t.Fatalf("a lease granted after the caller gave up is still held: %v", left)
		}
	}
	// Nor are the local slots kept.
	s, err := b.TryAcquireAll(ctx, names)
	if err != nil {
		t.Fatalf("TryAcquireAll after the abandoned attempt: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Observers never heard of the leases nobody was handed (events arrive
	// in order: every event of the abandoned attempt has come by the
	// release of the next set).
	for _, name := range names {
		events.await(t, "the release of the next set", is(EventReleased, name))
	}
	events.mu.Lock()
	defer events.mu.Unlock()
	for _, e := range events.events {
		if tokens[e.Token] && (e.Kind == EventAcquired || e.Kind == EventReleased || e.Kind == EventLost) {
			t.Errorf("an abandoned lease (token %d) was reported %s", e.Token, e.Kind)
		}
	}
}

// The lease outlives the context of the call that acquired it.
func TestLeaseOutlivesAcquireContext(t *testing.T) {
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	l, err := c.Acquire(ctx, "long", WithTTL(time.Second))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	// Renewals after the acquire context ended carry the lease past the
	// deadline it was acquired with.
	awaitKeptPast(t, log, l, l.Deadline())
	info, err := c.Get(context.Background(), "long")
	if err != nil || info.Token != l.Token() || info.Remaining <= 0 {
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
		if n, err := c.cleanup(ctx); err != nil || n != 0 {
			t.Fatalf("Cleanup = %d, %v", n, err)
		}
		if err := cl.Restart(ctx, mode); err != nil {
			t.Fatal(err)
		}
		// Acquire, not TryAcquire: it retries through the restart window
		// (the pool reconnects), and a release is not flushed before it
		// returns, so a crash (immediate restart) may bring the row back
		// until it expires.
		l, err = c.Acquire(ctx, "r", WithTTL(time.Second))
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
	if err := c.migrate(ctx); err != nil {
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
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	plant := func(name string, of *Client) {
		token := pgtest.Value[int64](t, `SELECT nextval($1::regclass)`, c.st.Names.QualifiedSeq())
		rows(t, c).Insert(name, "shared-label", token, time.Hour, fmt.Sprintf(`{"client": %q}`, of.id))
	}
	plant("mine", c)
	plant("theirs", other)

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

// A semaphore admits as many holders as it has slots; a waiter that found
// every slot held gets the slot that is released.
func TestSemaphoreAdmitsNHoldersAndWakesAWaiter(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	log := newEventLog()
	b := testClient(t, Config{Table: a.cfg.Table, Observer: log})
	var held []*Lease
	names := map[string]bool{}
	for i := range 3 {
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
	contended := func(e Event) bool { return e.Kind == EventContended && strings.HasPrefix(e.Name, "pool#") }
	if _, err := b.TryAcquire(ctx, "pool", WithSlots(3)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("fourth holder: %v", err)
	}
	for range 3 {
		log.await(t, "TryAcquire to find each slot held", contended)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "pool", WithSlots(3))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for range 3 {
		log.await(t, "the waiter to find each slot held", contended)
	}
	freed := held[1].Name()
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := pgtest.Receive(t, got, "the semaphore waiter to be woken")
	if l == nil || l.Name() != freed {
		t.Fatalf("waiter got %v, want slot %s", l, freed)
	}
	_ = l.Release(ctx)
	if _, err := a.TryAcquire(ctx, string(make([]byte, 254)), WithSlots(10)); !isInvalid(err, kindName) {
		t.Fatalf("name too long with slot suffix: %v", err)
	}
}

// A contender that finds a held lease whose heartbeat is older than
// AlertAfter reports it (an alert event naming the holder).
func TestContenderAlertsOnAHoldersOldHeartbeat(t *testing.T) {
	ctx := testCtx(t)
	// RenewInterval one hour is refused with a short TTL; hold with a long
	// TTL so no renewal happens during the test.
	holder := testClient(t, Config{TTL: 3 * time.Hour, RenewInterval: time.Hour, SafetyMargin: time.Second})
	log := newEventLog()
	watcher := testClient(t, Config{Table: holder.cfg.Table, AlertAfter: 300 * time.Millisecond, Observer: log})
	l, err := holder.TryAcquire(ctx, "stuck", WithTTL(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	rows(t, holder).SetHeartbeatAge("stuck", time.Second)
	if _, err := watcher.TryAcquire(ctx, "stuck"); !errors.Is(err, ErrNotAcquired) {
		t.Fatal(err)
	}
	e := log.await(t, "an alert", is(EventAlert, "stuck"))
	if e.Owner != holder.Owner() || e.Token != l.Token() || e.Age < time.Second {
		t.Fatalf("alert %+v", e)
	}
}

// Without fast failover, a crashed holder's lease is taken over when it
// expires: the waiter's timer fires at the server's remaining time, not at
// its hour-long fallback poll.
func TestWaiterTakesACrashedHoldersLeaseAtItsExpiry(t *testing.T) {
	ctx := testCtx(t)
	const ttl = 2 * time.Second
	log := newEventLog()
	c := testClient(t, Config{PollInterval: time.Hour, Observer: log})
	if err := c.migrate(ctx); err != nil {
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
	log.await(t, "the waiter to find the name held", is(EventContended, "plain"))
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l := pgtest.Receive(t, got, "the waiter to take over at expiry (the fallback poll is an hour)")
	if l == nil || l.Token() <= token {
		t.Fatalf("got %v", l)
	}
	_ = l.Release(ctx)
}

// endInFlight delays every chunk b sends or receives through proxy by
// delay and returns a context that ends the moment b's next statement
// leaves, and a channel that receives (up to n of) the leases of b on
// names "fresh…" as they end, until the test ends.
func endInFlight(t *testing.T, ctx context.Context, b *Client, proxy *pgtest.Proxy, delay time.Duration, n int) (context.Context, <-chan *Lease) {
	t.Helper()
	ended := make(chan *Lease, n)
	hook := func(l *Lease) {
		if l.c == b && strings.HasPrefix(l.name, "fresh") {
			select {
			case ended <- l:
			default:
			}
		}
	}
	testHookEnding.Store(&hook)
	t.Cleanup(func() { testHookEnding.Store(nil) })
	proxy.SetDelay(delay)
	sent := proxy.ClientSent()
	fctx, fcancel := context.WithCancel(ctx)
	t.Cleanup(fcancel)
	go func() {
		select {
		case <-sent:
		case <-fctx.Done():
		}
		fcancel()
	}()
	return fctx, ended
}
