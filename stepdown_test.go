package pglease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// A rolling deploy: three electors, and a fourth client asks the leader to
// step down. Leadership moves to another elector within a second, the old
// leader's term ends (with the cause ErrStepDown) before the new one
// begins, and the old leader stays out for its hold-off.
func TestStepDownMovesLeadership(t *testing.T) {
	ctx := testCtx(t)
	first := testClient(t, Config{})
	var mu sync.Mutex
	var log []string // "start i" and "end i", in the order they happened
	note := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
	}
	elected := make(chan int, 100)
	causes := make(chan error, 100)
	electors := make([]*Elector, 3)
	for i := range electors {
		c := first
		if i > 0 {
			c = testClient(t, Config{Table: first.cfg.Table})
		}
		e, err := c.NewElector("deploy", func(ctx context.Context) error {
			note("start " + string(rune('0'+i)))
			elected <- i
			<-ctx.Done()
			causes <- context.Cause(ctx)
			note("end " + string(rune('0'+i)))
			return nil
		}, ElectorConfig{
			LeaseOptions:    []Option{WithTTL(10 * time.Second)},
			StepDownHoldOff: time.Minute, // a stepped-down leader must not win again here
		})
		if err != nil {
			t.Fatal(err)
		}
		electors[i] = e
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, e := range electors {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(rctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	old := pgtest.Receive(t, elected, "a leader to be elected")
	// The other two wait for the lease (subscribed to its notifications).
	for i := range electors {
		if i != old {
			waitSubscribed(t, electors[i].c, "deploy", 1)
		}
	}

	admin := testClient(t, Config{Table: first.cfg.Table})
	asked := time.Now()
	if err := admin.RequestStepDown(ctx, "deploy"); err != nil {
		t.Fatal(err)
	}
	next := pgtest.Receive(t, elected, "another elector to lead after the step-down request")
	took := time.Since(asked)
	t.Logf("leadership moved from elector %d to %d in %v", old, next, took)
	if next == old {
		t.Fatal("the leader that was asked to step down was elected again")
	}
	if took > time.Second {
		t.Errorf("leadership moved %v after the request, want within 1s", took)
	}
	if cause := pgtest.Receive(t, causes, "the old term's cause"); !errors.Is(cause, ErrStepDown) {
		t.Errorf("the old term ended with cause %v, want ErrStepDown", cause)
	}
	mu.Lock()
	order := append([]string(nil), log...)
	mu.Unlock()
	want := []string{"start " + string(rune('0'+old)), "end " + string(rune('0'+old)), "start " + string(rune('0'+next))}
	if len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Fatalf("terms in this order: %v, want %v (the old term ends before the new one begins)", order, want)
	}
	// The new leader's lease carries no request: the acquisition cleared it.
	in, err := admin.Get(ctx, "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if got := pgtest.Value[bool](t, `SELECT "stepdown_at" IS NULL FROM `+first.st.Names.QualifiedTable()+` WHERE "name" = 'deploy'`); !got || in.Owner != electors[next].c.Owner() {
		t.Fatalf("the new leader's row: step-down cleared %v, owner %s (want %s)", got, in.Owner, electors[next].c.Owner())
	}
}

// A plain holder sees the request on its lease, at once when its client
// listens and with its next renewal when the notification never comes.
func TestStepDownRequestReachesALeaseHolder(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		ttl  time.Duration
	}{
		// No renewal comes within the test's patience: only the
		// notification can deliver the request.
		{"notified", Config{}, time.Hour},
		// Without notifications only the renewal can deliver it.
		{"by-renewal", Config{DisableNotify: true}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Table = pgtest.Schema(t) + ".leases"
			holder := testClient(t, cfg)
			admin := testClient(t, Config{Table: cfg.Table})
			if err := admin.RequestStepDown(ctx, "job"); !errors.Is(err, ErrNoTable) {
				t.Fatalf("RequestStepDown before the table exists = %v, want ErrNoTable", err)
			}
			if err := holder.migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := admin.RequestStepDown(ctx, "job"); !errors.Is(err, ErrNoLease) {
				t.Fatalf("RequestStepDown with nothing held = %v, want ErrNoLease", err)
			}
			l, err := holder.TryAcquire(ctx, "job", WithTTL(tc.ttl))
			if err != nil {
				t.Fatal(err)
			}
			requested := l.StepDownRequested()
			select {
			case <-requested:
				t.Fatal("a step-down was reported before anyone asked")
			default:
			}
			if !tc.cfg.DisableNotify {
				// The holder's listener is up (StepDownRequested started it).
				pgtest.WaitFor(t, patience, "the holder's dedicated connection", func() bool {
					s, err := holder.session()
					return err == nil && s.currentEpoch() > 0
				})
			}
			if err := admin.RequestStepDown(ctx, "job"); err != nil {
				t.Fatal(err)
			}
			pgtest.Receive(t, requested, "the holder to see the step-down request")
			if causeOf(l.Context()) != nil {
				t.Fatalf("the request ended the lease (%v); letting go is up to the holder", causeOf(l.Context()))
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// The next holder starts without a request.
			l2, err := holder.TryAcquire(ctx, "job", WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Release(ctx)
			if err := l2.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-l2.StepDownRequested():
				t.Fatal("a new acquisition inherited the previous holder's step-down request")
			default:
			}
		})
	}
}

// Bad input changes nothing.
func TestRequestStepDownRefusesBadNames(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	if err := c.RequestStepDown(ctx, ""); !isInvalid(err, kindName) {
		t.Fatalf("RequestStepDown(\"\") = %v, want an invalid lease name", err)
	}
}

// A request made before the holder's client listened (it listens once the
// holder asks to hear requests) reaches it once it listens, not a renewal
// later.
func TestStepDownRequestedBeforeTheHolderListened(t *testing.T) {
	ctx := testCtx(t)
	holder := testClient(t, Config{})
	admin := testClient(t, Config{Table: holder.cfg.Table})
	l, err := holder.TryAcquire(ctx, "job", WithTTL(time.Hour)) // no renewal within the test
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if listening(holder) {
		t.Fatal("the holder listens before it asked to hear step-down requests")
	}
	if err := admin.RequestStepDown(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	pgtest.Receive(t, l.StepDownRequested(), "the holder to see the request made before it listened")
}

// An elector asked to step down with no other candidate stays out for its
// hold-off, then campaigns and leads again.
func TestSteppedDownElectorLeadsAgainAfterItsHoldOff(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	const holdOff = 300 * time.Millisecond
	elected := make(chan time.Time, 10)
	ended := make(chan time.Time, 10)
	e, err := c.NewElector("alone", func(ctx context.Context) error {
		elected <- time.Now()
		<-ctx.Done()
		ended <- time.Now()
		return nil
	}, ElectorConfig{LeaseOptions: []Option{WithTTL(10 * time.Second)}, StepDownHoldOff: holdOff})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(rctx) }()
	defer func() { cancel(); <-done }()
	pgtest.Receive(t, elected, "the elector to lead")
	if err := c.RequestStepDown(ctx, "alone"); err != nil {
		t.Fatal(err)
	}
	end := pgtest.Receive(t, ended, "the term to end at the request")
	again := pgtest.Receive(t, elected, "the elector to lead again after its hold-off")
	if out := again.Sub(end); out < holdOff {
		t.Fatalf("the elector led again %v after it stepped down, within its %v hold-off", out, holdOff)
	}
}
