package pglease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

func TestOpenErrorsAreClearAndRedacted(t *testing.T) {
	ctx := testCtx(t)
	_, err := Open(ctx, "postgres://user:s3cret-pw@127.0.0.1:1/db?connect_timeout=2", Config{})
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") || !IsRetryable(errors.Unwrap(err)) && !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("unreachable DSN: %v", err)
	}
	_, err = Open(ctx, "postgres://user:s3cret-pw@127.0.0.1:notaport/db", Config{})
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("malformed DSN: %v", err)
	}
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
	if !errors.Is(causeOf(l.Context()), ErrClosed) {
		t.Fatalf("Err = %v, want ErrClosed", causeOf(l.Context()))
	}
	if _, err := a.TryAcquire(ctx, "c"); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryAcquire on closed client: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "c"); err != nil {
		t.Fatalf("lease not released by Close: %v", err)
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
	waitSubscribed(t, b, "w", 2)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := pgtest.Receive(t, done, "Close to wake a waiter"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Acquire after Close: %v", err)
		}
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
		// Not a wait: each round closes a little later into the
		// acquisitions, so that Close meets them at different points.
		time.Sleep(time.Duration(round) * 3 * time.Millisecond)
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		wg.Wait()
	}
}

// Right after a server restart every pooled connection is stale; calls that
// cannot have applied anything are retried on a fresh one instead of
// failing.
func TestCallsRetriedAfterServerRestart(t *testing.T) {
	cl := pgtest.RequireCluster(t)
	ctx := testCtx(t)
	c := testClient(t, Config{MaxConns: 4})
	l, err := c.TryAcquire(ctx, "warm", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	for _, mode := range []string{"fast", "immediate"} {
		// Fill the pool with idle connections.
		var conns []*Lease
		for i := range 4 {
			l, err := c.TryAcquire(ctx, "fill"+string(rune('a'+i)), WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, l)
		}
		for _, l := range conns {
			_ = l.Release(ctx)
		}
		if err := cl.Restart(ctx, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "none"); err != nil && !errors.Is(err, ErrNoLease) {
			t.Fatalf("%s: Get: %v", mode, err)
		}
		if _, err := c.list(ctx); err != nil {
			t.Fatalf("%s: List: %v", mode, err)
		}
		l, err := c.TryAcquire(ctx, "after-"+mode, WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: TryAcquire: %v", mode, err)
		}
		_ = l.Release(ctx)
		ran := false
		if err := c.TryRun(ctx, "run-"+mode, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Fatalf("%s: TryRun: ran %v, %v", mode, ran, err)
		}
	}
}

// A client that holds nothing and waits for nothing keeps one connection,
// its dedicated session: the pool's connections, which served its start
// and serve calls that run there (List), close once idle.
func TestIdleClientKeepsOneConnection(t *testing.T) {
	defer func(d time.Duration) { poolIdleTime = d }(poolIdleTime)
	poolIdleTime = 3 * time.Second
	ctx := testCtx(t)
	owner := "idle-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	c := testClient(t, Config{Owner: owner, MaxConns: 4})
	conns := func() int {
		return pgtest.Value[int](t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName(owner))
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			l, err := c.Acquire(ctx, fmt.Sprintf("idle-%d", i), WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
				return
			}
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, err := c.list(ctx); err != nil { // on the pool
		t.Fatal(err)
	}
	if n := conns(); n < 2 {
		t.Fatalf("%d connections after a List, want the session and the pool's", n)
	}
	pgtest.WaitFor(t, patience, "the idle pool's connections to close", func() bool { return conns() == 1 })
	if _, err := c.session(); err != nil {
		t.Fatal(err)
	}
	// The one left is the dedicated session: the client still acquires.
	l, err := c.TryAcquire(ctx, "idle-again")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A DSN that keeps idle connections for ever (pool_max_conn_idle_time=0)
// opens a client: the pool's health check period stays positive (it
// panicked in pgxpool when derived from that 0).
func TestOpenKeepsTheDSNsIdleTime(t *testing.T) {
	ctx := testCtx(t)
	c, err := Open(ctx, dsnWithParams(t, map[string]string{"pool_max_conn_idle_time": "0s"}), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.conn.ownPool.Config().MaxConnIdleTime; got != 0 {
		t.Fatalf("pool's idle time %v, want the DSN's 0", got)
	}
	if _, err := c.TryAcquire(ctx, "dsn-idle"); err != nil {
		t.Fatal(err)
	}
}
