package pglease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTryRunRunsOnExactlyOneInstance(t *testing.T) {
	ctx := testCtx(t)
	first := testClient(t, Config{})
	var ran atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make(chan error, 6)
	for i := 0; i < 6; i++ {
		c := first
		if i > 0 {
			c = testClient(t, Config{Table: first.cfg.Table})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results <- c.TryRun(ctx, "cron", func(ctx context.Context) error {
				ran.Add(1)
				time.Sleep(300 * time.Millisecond)
				return nil
			}, WithMinHold(2*time.Second))
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	var skipped int
	for err := range results {
		switch {
		case errors.Is(err, ErrNotAcquired):
			skipped++
		case err != nil:
			t.Fatal(err)
		}
	}
	if ran.Load() != 1 || skipped != 5 {
		t.Fatalf("ran %d times, skipped %d", ran.Load(), skipped)
	}
	// fn's error is returned; the lease is released afterwards.
	boom := errors.New("boom")
	c := testClient(t, Config{Table: first.cfg.Table})
	if err := c.Run(ctx, "other", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Run = %v", err)
	}
	if info, err := c.Get(ctx, "other"); err == nil && info.Held() {
		t.Fatalf("lease still held after Run: %+v", info)
	}
}

func TestTryRunReportsLossWhileRunning(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	admin := testClient(t, Config{Table: c.cfg.Table})
	err := c.TryRun(ctx, "job", func(ctx context.Context) error {
		if _, err := admin.ForceRelease(ctx, "job"); err != nil {
			return err
		}
		<-ctx.Done() // cancelled at the next renewal
		return nil
	}, WithTTL(time.Second))
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("TryRun = %v, want ErrLeaseLost", err)
	}
}

// Three electors: at most one leads at any instant; resigning and losing
// hand leadership over; Run returns only after lead returned.
func TestElectorSingleLeaderAndHandover(t *testing.T) {
	ctx := testCtx(t)
	first := testClient(t, Config{})
	var leaders atomic.Int32
	var terms atomic.Int32
	var overlap atomic.Bool
	electors := make([]*Elector, 3)
	clients := make([]*Client, 3)
	for i := range electors {
		c := first
		if i > 0 {
			c = testClient(t, Config{Table: first.cfg.Table})
		}
		clients[i] = c
		e, err := c.NewElector("leader", func(ctx context.Context) error {
			if leaders.Add(1) != 1 {
				overlap.Store(true)
			}
			terms.Add(1)
			<-ctx.Done()
			leaders.Add(-1)
			return nil
		}, WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		electors[i] = e
	}
	obs := electors[0].Observe(ctx)
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, e := range electors {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(rctx) }()
	}
	leaderOf := func() int {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for i, e := range electors {
				if e.IsLeader() {
					return i
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatal("nobody leads")
		return -1
	}
	cur := leaderOf()
	for first := <-obs; first.Owner != clients[cur].Owner(); first = <-obs {
	}
	info, err := electors[(cur+1)%3].Leader(ctx)
	if err != nil || info.Owner != clients[cur].Owner() {
		t.Fatalf("Leader() = %+v, %v; want %s", info, err, clients[cur].Owner())
	}
	electors[cur].Resign()
	deadline := time.Now().Add(10 * time.Second)
	for next := leaderOf(); next == cur; next = leaderOf() {
		if time.Now().After(deadline) {
			t.Fatal("resigned leader kept leading")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The observer sees the new leader.
	for done := false; !done; {
		select {
		case i := <-obs:
			done = i.Owner != "" && i.Owner != clients[cur].Owner()
		case <-time.After(10 * time.Second):
			t.Fatal("observer did not see the new leader")
		}
	}
	cancel()
	wg.Wait()
	if overlap.Load() {
		t.Fatal("two leaders at once")
	}
	if leaders.Load() != 0 {
		t.Fatal("Run returned before lead did")
	}
	if terms.Load() < 2 {
		t.Fatalf("%d terms", terms.Load())
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

// Close wakes a blocked Acquire, which returns ErrClosed.
func TestCloseWakesWaiters(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table, PollInterval: time.Hour})
	l, err := a.TryAcquire(ctx, "w", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	done := make(chan error, 2)
	go func() { _, err := b.Acquire(ctx, "w"); done <- err }()
	go func() { _, err := b.Acquire(ctx, "w"); done <- err }() // queued locally
	waitContended(t, b, "w")
	_ = b.Close()
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("Acquire after Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake a waiter")
		}
	}
}

// A short-TTL lease acquired while a long-TTL lease is held is renewed on
// its own schedule: one batch, but due at the earliest lease's time.
func TestShortLeaseRenewedBesideLongLease(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	long, err := c.TryAcquire(ctx, "long", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer long.Release(ctx)
	time.Sleep(50 * time.Millisecond) // the renew loop settles on the long lease
	short, err := c.TryAcquire(ctx, "short", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer short.Release(ctx)
	time.Sleep(2500 * time.Millisecond)
	if err := short.Err(); err != nil {
		t.Fatalf("short lease not renewed: %v", err)
	}
}

// Close racing with goroutines that keep starting acquisitions: every call
// returns (acquired, held elsewhere or ErrClosed), and Close waits for all
// the background work they started (the race detector flags a background
// goroutine registered while Close waits).
func TestCloseRacesWithAcquisitions(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	l, err := a.TryAcquire(ctx, "busy", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for round := range 10 {
		b := testClient(t, Config{Table: a.cfg.Table})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					var err error
					if g%2 == 0 {
						_, err = b.TryAcquire(ctx, "busy")
					} else {
						var l *Lease
						l, err = b.TryAcquire(ctx, fmt.Sprintf("free-%d-%d-%d", round, g, i))
						if err == nil {
							_ = l.Release(ctx)
						}
					}
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil && !errors.Is(err, ErrNotAcquired) {
						t.Errorf("during Close: %v", err)
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(round) * 3 * time.Millisecond)
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		wg.Wait()
	}
}
