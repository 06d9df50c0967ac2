package pglease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// Instances that TryRun one job at once: exactly one runs it, and the
// others return ErrNotAcquired at once; Run returns fn's error and releases.
func TestTryRunRunsOnExactlyOneInstance(t *testing.T) {
	ctx := testCtx(t)
	first := testClient(t, Config{})
	const instances = 6
	var ran, returned atomic.Int32
	othersReturned := make(chan struct{})
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make(chan error, instances)
	for i := range instances {
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
				// Hold the lease until every other instance has tried
				// (bounded: a second runner would wait for one too many).
				select {
				case <-othersReturned:
				case <-time.After(patience):
				}
				return nil
			}, WithMinHold(2*time.Second))
			if returned.Add(1) == instances-1 {
				close(othersReturned)
			}
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
	if ran.Load() != 1 || skipped != instances-1 {
		t.Fatalf("ran %d times, skipped %d", ran.Load(), skipped)
	}
	// fn's error is returned; the lease is released afterwards.
	boom := errors.New("boom")
	c := testClient(t, Config{Table: first.cfg.Table})
	if err := c.Run(ctx, "other", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Run = %v", err)
	}
	if info, err := c.Get(ctx, "other"); err == nil && info.Remaining > 0 {
		t.Fatalf("lease still held after Run: %+v", info)
	}
}

// A lease lost while TryRun's function runs ends the function's context
// and is reported by TryRun.
func TestTryRunReportsLossWhileRunning(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	admin := testClient(t, Config{Table: c.cfg.Table})
	err := c.TryRun(ctx, "job", func(ctx context.Context) error {
		if _, err := admin.forceRelease(ctx, "job"); err != nil {
			return err
		}
		select {
		case <-ctx.Done(): // cancelled at the next renewal
			return nil
		case <-time.After(patience):
			return errors.New("fn's context was not cancelled when the lease was lost")
		}
	}, WithTTL(time.Second))
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("TryRun = %v, want ErrLeaseLost", err)
	}
}

// heldLease returns the lease c holds on name, as its renewals see it.
func heldLease(c *Client, name string) *Lease {
	return c.reg.lease(name)
}

// passDeadline makes l's local deadline pass while its deadline timer
// cannot run, as when the process was paused past the deadline and has
// just resumed on a goroutine that runs before the timer's.
func passDeadline(t *testing.T, l *Lease) {
	t.Helper()
	if l == nil {
		t.Fatal("the lease is not held")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer.Stop()
	l.deadline = time.Now().Add(-time.Millisecond)
}

// checkLost fails unless ctx reports the loss of the lease at once.
func checkLost(t *testing.T, ctx context.Context) {
	t.Helper()
	if ctx.Err() == nil {
		t.Error("the context still looks live past the lease's local deadline")
		return
	}
	if !errors.Is(context.Cause(ctx), ErrLeaseLost) {
		t.Errorf("cause %v, want ErrLeaseLost", context.Cause(ctx))
	}
	select {
	case <-ctx.Done():
	default:
		t.Error("Err is set but Done is not closed")
	}
}

// The contexts Run, TryRun and an Elector hand to their functions see a
// passed deadline as soon as they are asked, like Lease.Context, without
// waiting for the deadline timer.
func TestCallbackContextsCheckDeadlineInline(t *testing.T) {
	ctx := testCtx(t)
	// A long TTL: no renewal or timer runs during the test.
	c := testClient(t, Config{TTL: time.Minute})
	for _, tc := range []struct {
		name string
		run  func(name string, fn func(context.Context) error) error
	}{
		{"TryRun", func(name string, fn func(context.Context) error) error { return c.TryRun(ctx, name, fn) }},
		{"Run", func(name string, fn func(context.Context) error) error { return c.Run(ctx, name, fn) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			err := tc.run(tc.name, func(fctx context.Context) error {
				ran = true
				if err := fctx.Err(); err != nil {
					t.Fatalf("context ended before the deadline passed: %v", err)
				}
				passDeadline(t, heldLease(c, tc.name))
				checkLost(t, fctx)
				return nil
			})
			if !ran {
				t.Fatalf("fn did not run: %v", err)
			}
			if !errors.Is(err, ErrLeaseLost) {
				t.Errorf("%s returned %v, want the loss reported", tc.name, err)
			}
		})
	}

	t.Run("Elector", func(t *testing.T) {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		checked := make(chan struct{})
		e, err := c.NewElector("leader", func(lctx context.Context) error {
			select {
			case <-checked: // a later term: wait to be stopped
				<-lctx.Done()
				return nil
			default:
			}
			defer close(checked)
			if err := lctx.Err(); err != nil {
				t.Errorf("context ended before the deadline passed: %v", err)
				return nil
			}
			passDeadline(t, heldLease(c, "leader"))
			checkLost(t, lctx)
			return nil
		}, ElectorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.Run(rctx) }()
		pgtest.Receive(t, checked, "the elector to be elected")
		stop()
		pgtest.Receive(t, done, "Run to return after its context was cancelled")
	})
}

// Those contexts still end when the caller's context ends, with its cause.
func TestCallbackContextsEndWithCaller(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	errStop := errors.New("caller stopped")
	for _, run := range []func(context.Context, string, func(context.Context) error, ...Option) error{c.TryRun, c.Run} {
		cctx, cancel := context.WithCancelCause(ctx)
		err := run(cctx, "job", func(fctx context.Context) error {
			cancel(errStop)
			pgtest.Receive(t, fctx.Done(), "fn's context to end with the caller's")
			if !errors.Is(context.Cause(fctx), errStop) || fctx.Err() == nil {
				t.Errorf("Err %v cause %v, want the caller's", fctx.Err(), context.Cause(fctx))
			}
			return nil
		})
		if err != nil {
			t.Errorf("run: %v", err)
		}
	}
	rctx, cancel := context.WithCancelCause(ctx)
	got := make(chan error, 1)
	e, err := c.NewElector("leader", func(lctx context.Context) error {
		cancel(errStop)
		<-lctx.Done()
		got <- context.Cause(lctx)
		return nil
	}, ElectorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(rctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Elector.Run: %v", err)
	}
	if cause := pgtest.Receive(t, got, "lead's cause"); !errors.Is(cause, errStop) {
		t.Errorf("lead's cause %v, want the caller's", cause)
	}
}
