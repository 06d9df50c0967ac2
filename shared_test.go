package pglease

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// Shared holders of a name hold it together, each with a row and a token
// of its own; an exclusive holder waits for all of them, and shared ones
// wait for it. Every hand-off is by a release's notification: the waits
// are bounded far below the TTL that expiry would need.
func TestSharedLeasesExcludeAnExclusiveOne(t *testing.T) {
	ctx := testCtx(t)
	ttl := WithTTL(time.Minute)
	a := testClient(t, Config{Owner: "reader-a"})
	b := testClient(t, Config{Table: a.cfg.Table, Owner: "reader-b"})
	w := testClient(t, Config{Table: a.cfg.Table, Owner: "writer"})
	ra, err := a.Acquire(ctx, "schema", WithShared(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.TryAcquire(ctx, "schema", WithShared(), ttl)
	if err != nil {
		t.Fatalf("a second shared lease beside the first: %v", err)
	}
	if !isShared(ra) || !isShared(rb) || ra.Name() == rb.Name() || !strings.HasPrefix(ra.Name(), "schema#") ||
		!strings.HasPrefix(rb.Name(), "schema#") || rb.Token() <= ra.Token() {
		t.Fatalf("shared leases %s (token %d) and %s (token %d)", ra.Name(), ra.Token(), rb.Name(), rb.Token())
	}
	var held *HeldError
	if _, err := w.TryAcquire(ctx, "schema", ttl); !errors.As(err, &held) || held.Holder.Owner == "" {
		t.Fatalf("an exclusive TryAcquire beside shared holders: %v, want a *HeldError naming one", err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := w.Acquire(ctx, "schema", ttl)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitWaiters(t, a, "schema", "writer")
	if ws, err := a.waiters(ctx, "schema"); err != nil || len(ws) != 1 || ws[0].Kind != "plain" {
		t.Fatalf("the exclusive waiter: %+v, %v; want one of kind plain", ws, err)
	}
	if in, err := a.Get(ctx, ra.Name()); err != nil || in.Kind != "shared" || in.Of != "schema" || in.Size != 0 || in.Weight != 1 {
		t.Fatalf("Get(%q) of a shared lease's row: %+v, %v; want kind shared of schema, size 0, weight 1", ra.Name(), in, err)
	}
	if err := ra.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("the exclusive lease was granted while a shared holder still held the name")
	case <-time.After(200 * time.Millisecond):
	}
	if err := rb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	x := pgtest.Receive(t, got, "the exclusive lease after the last shared holder released")
	if isShared(x) || x.Name() != "schema" || x.Token() <= rb.Token() {
		t.Fatalf("exclusive lease %s token %d", x.Name(), x.Token())
	}
	if _, err := a.TryAcquire(ctx, "schema", WithShared(), ttl); !errors.As(err, &held) || held.Holder.Owner != "writer" {
		t.Fatalf("a shared TryAcquire beside the exclusive holder: %v, want a *HeldError naming it", err)
	}
	shared := make(chan *Lease, 2)
	for _, c := range []*Client{a, b} {
		go func() {
			l, err := c.Acquire(ctx, "schema", WithShared(), ttl)
			if err != nil {
				t.Error(err)
			}
			shared <- l
		}()
	}
	waitWaiters(t, a, "schema", "reader-a", "reader-b")
	if ws, err := a.waiters(ctx, "schema"); err != nil || len(ws) != 2 || ws[0].Kind != "shared" || ws[1].Kind != "shared" {
		t.Fatalf("the shared waiters: %+v, %v; want two of kind shared", ws, err)
	}
	if in, err := a.Get(ctx, "schema"); err != nil || in.Kind != "plain" || in.Of != "" || in.Size != 0 || in.Weight != 1 {
		t.Fatalf("Get of a plain lease's row: %+v, %v; want kind plain of no name, size 0, weight 1", in, err)
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		l := pgtest.Receive(t, shared, "a shared lease after the exclusive holder released")
		if l.Token() <= x.Token() {
			t.Errorf("shared token %d not above the exclusive one %d", l.Token(), x.Token())
		}
		defer l.Release(ctx)
	}
}

// waitWaiters waits until the owners wait for name, in any order, and
// nobody else does.
func waitWaiters(t *testing.T, c *Client, name string, owners ...string) {
	t.Helper()
	pgtest.WaitFor(t, patience, "waiters "+strings.Join(owners, ", ")+" in the queue of "+name, func() bool {
		ws, err := c.waiters(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) != len(owners) {
			return false
		}
		for _, o := range owners {
			found := false
			for _, w := range ws {
				found = found || w.Owner == o
			}
			if !found {
				return false
			}
		}
		return true
	})
}

// An exclusive waiter is not starved by a stream of shared holders that
// hand the name on hand over hand, so that it is never free of them: each
// reader takes its next shared lease before it lets the current one go,
// and only when that is refused does it let go first and wait. Once the
// exclusive waiter queues, new shared acquisitions are refused behind it
// (their *HeldError says it is queued ahead), the holders drain, and it
// gets the name; no shared holder holds while it does. Without that rule
// every TryAcquire of a reader succeeds and the writer waits forever (the
// test fails at its 20 s bound). The same holds for a writer without a
// session of its own (DisableNotify: the setting for PgBouncer in
// transaction mode), which cannot queue: its registration, live while
// fresh, keeps the readers away as well (it starved for 10 s before).
func TestExclusiveWaiterIsNotStarvedBySharedOnes(t *testing.T) {
	t.Run("queued", func(t *testing.T) { exclusiveWaiterNotStarved(t, Config{Owner: "writer"}) })
	t.Run("without a session", func(t *testing.T) {
		exclusiveWaiterNotStarved(t, Config{Owner: "writer", DisableNotify: true, PollInterval: 200 * time.Millisecond})
	})
}

func exclusiveWaiterNotStarved(t *testing.T, cfg Config) {
	ctx := testCtx(t)
	first := testClient(t, cfg)
	var (
		mu      sync.Mutex
		holding int // shared leases held now
		during  int // shared leases acquired while the exclusive lease was held
		writing bool
		behind  int // shared TryAcquires refused behind the queued writer
	)
	acquired := func() {
		mu.Lock()
		holding++
		if writing {
			during++
		}
		mu.Unlock()
	}
	release := func(l *Lease) {
		mu.Lock()
		holding--
		mu.Unlock()
		_ = l.Release(ctx)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		c := testClient(t, Config{Table: first.cfg.Table, Owner: "reader"})
		wg.Add(1)
		go func() {
			defer wg.Done()
			cur, err := c.Acquire(ctx, "config", WithShared())
			if err != nil {
				t.Error(err)
				return
			}
			acquired()
			for {
				select {
				case <-stop:
					release(cur)
					return
				case <-time.After(time.Duration(20+10*i) * time.Millisecond):
				}
				next, err := c.TryAcquire(ctx, "config", WithShared())
				if err == nil {
					acquired()
					release(cur)
					cur = next
					continue
				}
				var held *HeldError
				if !errors.As(err, &held) {
					t.Error(err)
					release(cur)
					return
				}
				if held.Queued > 0 {
					mu.Lock()
					behind++
					mu.Unlock()
				}
				release(cur)
				if cur, err = c.Acquire(ctx, "config", WithShared()); err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				acquired()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	pgtest.WaitFor(t, patience, "overlapping shared holders", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return holding >= 3
	})
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	x, err := first.Acquire(wctx, "config")
	if err != nil {
		t.Fatalf("the exclusive waiter starved: %v", err)
	}
	mu.Lock()
	writing = true
	n := holding
	mu.Unlock()
	time.Sleep(100 * time.Millisecond) // the readers keep trying meanwhile
	mu.Lock()
	writing = false
	refused, d := behind, during
	mu.Unlock()
	_ = x.Release(ctx)
	if n != 0 || d != 0 {
		t.Errorf("shared holders held beside the exclusive lease: %d at its grant, %d acquired during it", n, d)
	}
	if refused == 0 {
		t.Errorf("no shared TryAcquire was refused behind the queued exclusive waiter")
	}
}

// Goroutines of one client share a name too; the client's own exclusive
// acquisition waits for them.
func TestSharedLeasesWithinOneClient(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l1, err := c.TryAcquire(ctx, "cache", WithShared())
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.TryAcquire(ctx, "cache", WithShared())
	if err != nil {
		t.Fatalf("a second shared lease in the same client: %v", err)
	}
	if l1.Name() == l2.Name() {
		t.Fatalf("both shared leases hold row %s", l1.Name())
	}
	if _, err := c.TryAcquire(ctx, "cache"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("the client's own exclusive TryAcquire beside its shared leases: %v", err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "cache")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitWaiters(t, c, "cache", c.Owner())
	_ = l1.Release(ctx)
	_ = l2.Release(ctx)
	x := pgtest.Receive(t, got, "the exclusive lease of the client")
	_ = x.Release(ctx)
	if info, err := c.Get(ctx, l1.Name()); err == nil && info.Remaining > 0 {
		t.Errorf("row %s still held: %+v", l1.Name(), info)
	}
}

// A name is one kind of lease: a semaphore and shared leases of one name
// refuse each other with a *KindError naming both kinds, and the options
// that do not combine are refused before anything is sent.
func TestSharedLeasesAndSemaphoresRefuseEachOther(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	s, err := c.TryAcquire(ctx, "pool", WithShared())
	if err != nil {
		t.Fatal(err)
	}
	var ke *KindError
	for range 12 { // the slots in random order: pool#0, the shared lease's row, is hit first now and then
		if _, err := c.TryAcquire(ctx, "pool", WithSlots(3)); !errors.As(err, &ke) || ke.Have != "shared lease" || ke.Want != "semaphore of 3 slots" ||
			!strings.Contains(err.Error(), "held as a shared lease") {
			t.Fatalf("slots beside shared leases: %v", err)
		}
	}
	// The refused slot attempts of the client left its shared lease alone
	// (its row is the client's, but no orphan).
	if err := s.Renew(ctx); err != nil {
		t.Fatalf("the shared lease after the refused slot attempts: %v", err)
	}
	if info, err := c.Get(ctx, s.Name()); err != nil || info.Token != s.Token() {
		t.Fatalf("the shared lease's row after the refused slot attempts: %+v, %v", info, err)
	}
	_ = s.Release(ctx)
	slot, err := c.TryAcquire(ctx, "pool", WithSlots(3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "pool", WithShared()); !errors.As(err, &ke) || ke.Have != "semaphore of 3 slots" || ke.Want != "shared lease" {
		t.Fatalf("a shared lease beside slots: %v", err)
	}
	_ = slot.Release(ctx)
	var ie *InvalidError
	for _, err := range []error{
		(Config{}).Validate(WithShared(), WithSlots(2)),
		func() error {
			_, err := c.NewElector("e", func(context.Context) error { return nil }, ElectorConfig{LeaseOptions: []Option{WithShared()}})
			return err
		}(),
		func() error { _, err := c.TryAcquireAll(ctx, []string{"a", "b"}, WithShared()); return err }(),
	} {
		if !errors.As(err, &ie) {
			t.Errorf("%v, want an *InvalidError", err)
		}
	}
}

// A set that includes a name held shared waits for its shared holders
// like an exclusive lease does.
func TestSetWaitsForSharedHolders(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	other := testClient(t, Config{Table: c.cfg.Table})
	s, err := other.Acquire(ctx, "b", WithShared())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquireAll(ctx, []string{"a", "b"}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a set over a name held shared: %v", err)
	}
	got := make(chan *LeaseSet, 1)
	go func() {
		set, err := c.AcquireAll(ctx, []string{"a", "b"})
		if err != nil {
			t.Error(err)
		}
		got <- set
	}()
	select {
	case <-got:
		t.Fatal("the set was granted beside a shared holder")
	case <-time.After(200 * time.Millisecond):
	}
	_ = s.Release(ctx)
	set := pgtest.Receive(t, got, "the set after the shared holder released")
	_ = set.Release(ctx)
}

// Fast failover holds for the kinds that share a name: a SIGKILLed shared
// holder's session ends and an exclusive waiter takes the name at once,
// long before the TTL; a SIGKILLed exclusive holder's shared waiter does
// the same, and so does a waiter for a quota's units a SIGKILLed holder
// had (3 of 5: the waiter's 3 fit only once they are free).
func TestSharedLeasesFailOverFast(t *testing.T) {
	ctx := testCtx(t)
	w := testClient(t, Config{})
	ttl := 30 * time.Second
	for _, tc := range []struct {
		name      string
		holderEnv []string
		waitOpts  []Option
	}{
		{"shared holder, exclusive waiter", []string{"PGLEASE_TEST_FAST=1", "PGLEASE_TEST_SHARED=1"}, []Option{WithFastFailover()}},
		{"exclusive holder, shared waiter", []string{"PGLEASE_TEST_FAST=1"}, []Option{WithShared()}},
		// A quota's holder frees its units: its waiter watches it too.
		{"quota holder, quota waiter", []string{"PGLEASE_TEST_FAST=1", "PGLEASE_TEST_QUOTA=5,3"}, []Option{WithQuota(5, 3), WithFastFailover()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "ff-" + strings.ReplaceAll(tc.name, " ", "-")
			name = strings.ReplaceAll(name, ",", "")
			cmd, token := startHolderEnv(t, w.cfg.Table, name, ttl, tc.holderEnv...)
			wctx, cancel := context.WithTimeout(ctx, ttl/2) // expiry would need the whole TTL
			defer cancel()
			got := make(chan *Lease, 1)
			go func() {
				l, err := w.Acquire(wctx, name, tc.waitOpts...)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			time.Sleep(300 * time.Millisecond) // past the 200 ms before a waiter watches a holder's session
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			l := pgtest.Receive(t, got, "the lease of the SIGKILLed holder")
			if l == nil {
				t.FailNow()
			}
			if l.Token() <= token {
				t.Errorf("token %d not above the dead holder's %d", l.Token(), token)
			}
			_ = l.Release(ctx)
		})
	}
}

// Guard means what it says for a shared lease: it passes while the
// shared lease is held, and fails once an exclusive holder has taken the
// name over the expired shared lease (whose row it deleted).
func TestGuardOfASharedLease(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.Acquire(ctx, "doc", WithShared())
	if err != nil {
		t.Fatal(err)
	}
	guard := func() error {
		tx, err := pgtest.Pool(t).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if err := l.Guard(ctx, tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := guard(); err != nil {
		t.Fatalf("Guard of a held shared lease: %v", err)
	}
	rows(t, c).SetExpiry(l.Name(), -time.Second)
	other := testClient(t, Config{Table: c.cfg.Table})
	x, err := other.TryAcquire(ctx, "doc")
	if err != nil {
		t.Fatalf("the exclusive lease over an expired shared one: %v", err)
	}
	defer x.Release(ctx)
	if _, ok := rows(t, c).Get(l.Name()); ok {
		t.Errorf("the expired shared row %s is still there", l.Name())
	}
	if err := guard(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Guard of the shared lease after the exclusive takeover: %v, want ErrNotHeld", err)
	}
}

// A stale holder's guarded write commits before the other kind takes the
// name over: the acquisition deletes the ended row of the other kind,
// which waits for the Guard's lock, as a takeover of a plain row does. The
// guarded transaction is kept busy past the lease's expiry (its renewals
// skip the locked row); the contender, once the row has expired, waits
// for it to commit. Both ways round: a shared holder and an exclusive
// contender, and the other way.
func TestGuardOrdersATakeoverByTheOtherKind(t *testing.T) {
	for _, tc := range []struct {
		name             string
		holder, contends []Option
	}{
		{"shared holder, exclusive contender", []Option{WithShared()}, nil},
		{"exclusive holder, shared contender", nil, []Option{WithShared()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := testClient(t, Config{TTL: time.Second})
			taker := testClient(t, Config{Table: c.cfg.Table, Owner: "taker"})
			l, err := c.Acquire(ctx, "doc", tc.holder...)
			if err != nil {
				t.Fatal(err)
			}
			pool := pgtest.Pool(t)
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if err := l.Guard(ctx, tx); err != nil {
				t.Fatal(err)
			}
			// The transaction stays busy (not idle: the Guard's idle bound
			// would end it) until the test lets it go: it waits for an
			// advisory lock the test holds.
			key := rand.Int64()
			gate, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer gate.Release()
			if _, err := gate.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
				t.Fatal(err)
			}
			busy := make(chan error, 1)
			go func() {
				_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key)
				busy <- err
			}()
			pgtest.WaitFor(t, patience, "the guarded lease's row to expire", func() bool {
				return pgtest.Value[bool](t, `SELECT expires_at <= now() FROM `+c.st.Names.QualifiedTable()+` WHERE name = $1`, l.Name())
			})
			got := make(chan error, 1)
			go func() {
				x, err := taker.TryAcquire(ctx, "doc", tc.contends...)
				if err == nil {
					defer x.Release(ctx)
				}
				got <- err
			}()
			pgtest.WaitLockWait(t, "pglease taker")
			select {
			case err := <-got:
				t.Fatalf("the other kind took the name while the stale holder's guarded transaction was open: %v", err)
			default:
			}
			if _, err := gate.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
				t.Fatal(err)
			}
			if err := pgtest.Receive(t, busy, "the guarded transaction's work"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("the guarded transaction, committed before the takeover: %v", err)
			}
			if err := pgtest.Receive(t, got, "the takeover after the commit"); err != nil {
				t.Fatalf("the takeover after the commit: %v", err)
			}
		})
	}
}

// A writer without a session, refused by shared holders, is listed among
// the waiters while it polls, and leaves when it gives up: shared leases
// of the name are then granted again long before its registration would
// go stale (31 s: it polls every 10 s, and gives up between two polls).
func TestAPollingWriterLeavesWhenItGivesUp(t *testing.T) {
	ctx := testCtx(t)
	// Nothing wakes the writer before its poll (the reader has no bell to
	// watch), so no attempt of its is in flight when it gives up: one
	// that lands after the leave registers it again, until it goes stale.
	r := testClient(t, Config{Owner: "reader", DisableNotify: true})
	w := testClient(t, Config{Table: r.cfg.Table, Owner: "writer", DisableNotify: true, PollInterval: 10 * time.Second})
	held, err := r.Acquire(ctx, "config", WithShared())
	if err != nil {
		t.Fatal(err)
	}
	// The writer's dedicated connection (which a DisableNotify client
	// opens for renewals, not to queue) wakes every wait once it is up:
	// up before the wait, so that the wait attempts once.
	warm, err := w.Acquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	pgtest.WaitFor(t, patience, "the writer's dedicated connection", w.conn.sess.Load().connected)
	wctx, cancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() {
		_, err := w.Acquire(wctx, "config")
		gave <- err
	}()
	pgtest.WaitFor(t, patience, "the polling writer to be listed", func() bool {
		ws, err := r.waiters(ctx, "config")
		return err == nil && len(ws) == 1 && ws[0].Owner == "writer" && ws[0].Kind == "plain"
	})
	var he *HeldError
	if _, err := r.TryAcquire(ctx, "config", WithShared()); !errors.As(err, &he) || he.Queued != 1 {
		t.Fatalf("a shared TryAcquire behind the polling writer: %v, want refused with 1 queued ahead", err)
	}
	cancel()
	if err := pgtest.Receive(t, gave, "the writer to give up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the writer's Acquire: %v", err)
	}
	var second *Lease
	pgtest.WaitFor(t, patience, "a shared lease once the writer left", func() bool {
		second, err = r.TryAcquire(ctx, "config", WithShared())
		return err == nil
	})
	if ws, err := r.waiters(ctx, "config"); err != nil || len(ws) != 0 {
		t.Fatalf("waiters once the writer left: %v, %v", ws, err)
	}
	_ = second.Release(ctx)
	_ = held.Release(ctx)
}

// A writer refused by shared holders before its dedicated session is up
// registers no polling waiter (live while fresh, whether its client lives
// or not): it queues once its session is, and then counts only while that
// session does. So does a quota's wait refused for want of units. (A
// polling registration written in that window by a client killed just
// after held every shared acquisition of the name back for the queue's
// TTL, 16 s: the combination test's seed 519267.)
func TestAWriterWhoseSessionIsComingUpDoesNotPoll(t *testing.T) {
	ttl := WithTTL(time.Minute)
	t.Run("exclusive behind shared holders", func(t *testing.T) {
		comingUpDoesNotPoll(t, []Option{WithShared()}, nil, []Option{WithShared()})
	})
	t.Run("quota", func(t *testing.T) {
		comingUpDoesNotPoll(t, []Option{WithQuota(4, 3), ttl}, []Option{WithQuota(4, 2), ttl}, []Option{WithQuota(4, 1), ttl})
	})
}

// comingUpDoesNotPoll runs TestAWriterWhoseSessionIsComingUpDoesNotPoll:
// a holder takes "config" with hold; a waiter with the options wait is
// refused while its session is held off; a TryAcquire with other by the
// holder's client is granted then, and refused behind the waiter once it
// queued.
func comingUpDoesNotPoll(t *testing.T, hold, wait, other []Option) {
	ctx := testCtx(t)
	r := testClient(t, Config{Owner: "reader"})
	contended := make(chan struct{}, 1)
	w := testClient(t, Config{Table: r.cfg.Table, Owner: "writer", Observer: observerFunc(func(e Event) {
		if e.Kind == EventContended {
			select {
			case contended <- struct{}{}:
			default:
			}
		}
	})})
	held, err := r.Acquire(ctx, "config", hold...)
	if err != nil {
		t.Fatal(err)
	}
	proceed := make(chan struct{})
	var once sync.Once
	up := func() { once.Do(func() { close(proceed) }) }
	hook := func(client string) {
		if client == w.id {
			<-proceed
		}
	}
	testHookConnect.Store(&hook)
	t.Cleanup(func() { testHookConnect.Store(nil) })
	t.Cleanup(up)
	got := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctx, "config", wait...)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	pgtest.Receive(t, contended, "the writer's first refusal")
	registered := func() (n int, polling bool) {
		pgtest.QueryRow(t, `SELECT count(*), coalesce(bool_or("polling"), false) FROM `+w.st.Names.QualifiedWaiters()+` WHERE "client" = $1`,
			[]any{w.id}, &n, &polling)
		return n, polling
	}
	if n, polling := registered(); n != 0 {
		t.Fatalf("the writer registered (polling %v) while its session was still coming up", polling)
	}
	second, err := r.TryAcquire(ctx, "config", other...)
	if err != nil {
		t.Fatalf("a TryAcquire while the writer's session comes up: %v, want granted", err)
	}
	_ = second.Release(ctx)
	up()
	pgtest.WaitFor(t, patience, "the writer to queue once its session is up", func() bool {
		n, polling := registered()
		return n == 1 && !polling
	})
	var he *HeldError
	if _, err := r.TryAcquire(ctx, "config", other...); !errors.As(err, &he) || he.Queued != 1 {
		t.Fatalf("a TryAcquire behind the queued writer: %v, want refused with 1 queued ahead", err)
	}
	_ = held.Release(ctx)
	if err := pgtest.Receive(t, got, "the writer's lease"); err != nil {
		t.Fatalf("the writer's Acquire: %v", err)
	}
}

// isShared reports whether l was acquired as a shared lease.
func isShared(l *Lease) bool { return l.kind == kind(kindShared{}) }
