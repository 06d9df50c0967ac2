package pglease

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// A quota's holders take units of it, each with a row and a token of its
// own, and never more than its capacity between them; a release frees
// the holder's units for the next, by a notification (the waits are
// bounded far below the TTL that expiry would need).
func TestQuotaHoldsAtMostItsCapacity(t *testing.T) {
	ctx := testCtx(t)
	ttl := WithTTL(time.Minute)
	a := testClient(t, Config{Owner: "a"})
	b := testClient(t, Config{Table: a.cfg.Table, Owner: "b"})
	var held []*Lease
	for i, c := range []*Client{a, b, a} {
		l, err := c.TryAcquire(ctx, "conns", WithQuota(10, 3), ttl)
		if err != nil {
			t.Fatalf("holder %d of 3 units of 10: %v", i, err)
		}
		if !strings.HasPrefix(l.Name(), "conns#") {
			t.Fatalf("a quota's lease is named %q, want conns#i", l.Name())
		}
		for _, h := range held {
			if h.Name() == l.Name() || h.Token() >= l.Token() {
				t.Fatalf("two holders %s (token %d) and %s (token %d)", h.Name(), h.Token(), l.Name(), l.Token())
			}
		}
		held = append(held, l)
	}
	var he *HeldError
	if _, err := b.TryAcquire(ctx, "conns", WithQuota(10, 2), ttl); !errors.As(err, &he) || he.Holder.Owner == "" {
		t.Fatalf("2 units beside 9 of 10 held: %v, want a *HeldError naming a holder", err)
	}
	one, err := b.TryAcquire(ctx, "conns", WithQuota(10, 1), ttl)
	if err != nil {
		t.Fatalf("the tenth unit: %v", err)
	}
	infos, err := a.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	units := 0
	for _, in := range infos {
		if strings.HasPrefix(in.Name, "conns#") && in.Remaining > 0 {
			units += quotaWeight(t, a, in.Name)
		}
	}
	if units != 10 {
		t.Fatalf("the table's live rows of the quota weigh %d units, want 10", units)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "conns", WithQuota(10, 3), ttl)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitWaiters(t, a, "conns", "b")
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("3 units were granted while only 1 was free")
	case <-time.After(200 * time.Millisecond):
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := pgtest.Receive(t, got, "3 units once 4 were free")
	if l == nil || l.Token() <= one.Token() {
		t.FailNow()
	}
	for _, h := range append(held[1:], l) {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// quotaWeight reads the units a row of a quota takes.
func quotaWeight(t *testing.T, c *Client, row string) int {
	t.Helper()
	return pgtest.Value[int](t, `SELECT "weight" FROM `+c.cfg.Table+` WHERE "name" = $1`, row)
}

// First in line first: a large request that waits is not overtaken by
// small ones, although units enough for them are free; a TryAcquire is
// refused while it waits, with Queued saying why. Without the rule the
// small requests take every unit freed and the large one starves.
func TestQuotaServesWaitersInOrder(t *testing.T) {
	t.Run("queued", func(t *testing.T) { quotaInOrder(t, Config{Owner: "large"}) })
	t.Run("without a session", func(t *testing.T) {
		quotaInOrder(t, Config{Owner: "large", DisableNotify: true, PollInterval: 200 * time.Millisecond})
	})
}

func quotaInOrder(t *testing.T, cfg Config) {
	ctx := testCtx(t)
	ttl := WithTTL(time.Minute)
	small := testClient(t, Config{Owner: "small"})
	cfg.Table = small.cfg.Table
	large := testClient(t, cfg)
	first, err := small.Acquire(ctx, "q", WithQuota(4, 2), ttl)
	if err != nil {
		t.Fatal(err)
	}
	second, err := small.Acquire(ctx, "q", WithQuota(4, 1), ttl)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := large.Acquire(ctx, "q", WithQuota(4, 4), ttl)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitWaiters(t, small, "q", "large")
	var he *HeldError
	if _, err := small.TryAcquire(ctx, "q", WithQuota(4, 1), ttl); !errors.As(err, &he) || he.Queued != 1 {
		t.Fatalf("1 free unit behind a waiter for 4: %v, want refused with 1 queued ahead", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := small.TryAcquire(ctx, "q", WithQuota(4, 1), ttl); !errors.As(err, &he) || he.Queued != 1 {
		t.Fatalf("3 free units behind a waiter for 4: %v, want refused with 1 queued ahead", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := pgtest.Receive(t, got, "the waiter for every unit")
	if l == nil {
		t.FailNow()
	}
	if _, err := small.TryAcquire(ctx, "q", WithQuota(4, 1), ttl); !errors.As(err, &he) {
		t.Fatalf("a unit beside the holder of all 4: %v, want a *HeldError", err)
	}
	if ws, err := small.waiters(ctx, "q"); err != nil || len(ws) != 0 {
		t.Fatalf("waiters once granted: %v, %v", ws, err)
	}
	_ = l.Release(ctx)
}

// A name is one kind of lease: a quota refuses a plain lease, a shared
// one, a semaphore and a quota of another capacity of its name, and is
// refused by them, with a *KindError that names both; nothing is written.
func TestQuotaAndOtherKindsRefuseEachOther(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	q, err := c.Acquire(ctx, "k", WithQuota(10, 2))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{nil, "plain lease"},
		{[]Option{WithShared()}, "shared lease"},
		{[]Option{WithSlots(3)}, "semaphore of 3 slots"},
		{[]Option{WithQuota(5, 2)}, "quota of 5 units"},
	} {
		var ke *KindError
		if _, err := c.TryAcquire(ctx, "k", tc.opts...); !errors.As(err, &ke) || ke.Want != tc.want || ke.Have != "quota of 10 units" {
			t.Errorf("%s beside a quota of 10: %v, want a *KindError", tc.want, err)
		}
	}
	_ = q.Release(ctx)
	p, err := c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	other := testClient(t, Config{Table: c.cfg.Table})
	var ke *KindError
	if _, err := other.TryAcquire(ctx, "k", WithQuota(10, 1)); !errors.As(err, &ke) || ke.Have != "plain lease" || ke.Want != "quota of 10 units" {
		t.Fatalf("a quota beside a plain lease: %v, want a *KindError", err)
	}
	_ = p.Release(ctx)
	if n := pgtest.Value[int](t, `SELECT count(*) FROM `+c.cfg.Table); n != 0 {
		t.Fatalf("%d rows left", n)
	}
}

// Options that make no quota are refused before anything is sent.
func TestQuotaOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithQuota(0, 1)}, "1 to 2147483647 units"},
		{[]Option{WithQuota(3, 4)}, "weight must be 1 to the quota's 3 units"},
		{[]Option{WithQuota(3, 0)}, "weight must be 1"},
		{[]Option{WithQuota(3, 1), WithShared()}, "do not combine"},
		{[]Option{WithQuota(3, 1), WithSlots(2)}, "do not combine"},
	} {
		_, err := (Config{}).Plan("n", tc.opts...)
		var ie *InvalidError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: want an *InvalidError saying %q", err, tc.want)
		}
	}
}

// Guard passes while a quota's lease is held and fails once it is not.
func TestGuardOfAQuotaLease(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.Acquire(ctx, "g", WithQuota(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.Pool(t)
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Guard(ctx, tx); err != nil {
		t.Fatalf("Guard of a held quota lease: %v", err)
	}
	_ = tx.Rollback(ctx)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := l.Guard(ctx, tx); err == nil {
		t.Fatal("Guard of a released quota lease passed")
	}
}

// A quota's units stay taken through a minimum hold, after the holder's
// release (the row, kept, no longer names its client), and are freed at a
// maximum hold, the row deleted, to a waiter that takes them at once.
func TestQuotaHoldLimits(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{Owner: "a"})
	b := testClient(t, Config{Table: a.cfg.Table, Owner: "b"})
	kept, err := a.Acquire(ctx, "h", WithQuota(2, 2), WithMinHold(time.Minute), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var he *HeldError
	if _, err := b.TryAcquire(ctx, "h", WithQuota(2, 1)); !errors.As(err, &he) {
		t.Fatalf("a unit of a quota whose 2 units are kept for a minimum hold: %v, want a *HeldError", err)
	}
	if _, err := a.TryAcquire(ctx, "h", WithQuota(2, 1)); !errors.As(err, &he) {
		t.Fatalf("a unit to the client whose release is kept: %v, want a *HeldError", err)
	}
	pgtest.Exec(t, `DELETE FROM `+a.cfg.Table)
	limited, err := a.Acquire(ctx, "h", WithQuota(2, 2), WithMaxHold(time.Second), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Acquire(ctx, "h", WithQuota(2, 2), WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("the units at the maximum hold: %v", err)
	}
	if !errors.Is(causeOf(limited.Context()), ErrHoldLimit) || got.Token() <= limited.Token() {
		t.Fatalf("limited lease ended with %v; the waiter's token %d, the limited one's %d", causeOf(limited.Context()), got.Token(), limited.Token())
	}
	_ = got.Release(ctx)
}

// A quota's waiter watches every fast-failover holder, not only the one
// its refusal names: here the holder that expires first (1 unit, the one
// named) lives on, and the one whose death frees the 2 units the waiter
// needs (a process of its own) is SIGKILLed. The waiter polls once an
// hour: only its watch of that session can wake it. Without it, it waited
// for its poll (the test's 20 s bound).
func TestQuotaWaiterWatchesEveryFastFailoverHolder(t *testing.T) {
	ctx := testCtx(t)
	w := testClient(t, Config{PollInterval: time.Hour})
	_, _ = startHolderEnv(t, w.cfg.Table, "fq", 30*time.Second, "PGLEASE_TEST_FAST=1", "PGLEASE_TEST_QUOTA=3,1")
	big, token := startHolderEnv(t, w.cfg.Table, "fq", time.Minute, "PGLEASE_TEST_FAST=1", "PGLEASE_TEST_QUOTA=3,2")
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := make(chan *Lease, 1)
	go func() {
		l, err := w.Acquire(wctx, "fq", WithQuota(3, 2), WithFastFailover())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitWaiters(t, w, "fq", w.cfg.Owner)
	time.Sleep(300 * time.Millisecond) // past the 200 ms before a waiter watches a holder's session
	if err := big.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l := pgtest.Receive(t, got, "the units of the SIGKILLed holder")
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= token {
		t.Errorf("token %d not above the dead holder's %d", l.Token(), token)
	}
	_ = l.Release(ctx)
}
