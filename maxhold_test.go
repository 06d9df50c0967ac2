package pglease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// A holder that is alive but stuck: it never releases and its renewals
// keep succeeding, yet with WithMaxHold its lease ends at the limit (the
// cause matches ErrHoldLimit and ErrLeaseLost), its row is deleted, and a
// waiter of another client takes the name at once, long before the TTL the
// renewals keep extending could run out. The waiter's wait is bounded well
// below that TTL, so without the limit the test fails.
func TestMaxHoldEndsAStuckHolder(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	holder := testClient(t, Config{TTL: 30 * time.Second, RenewInterval: 200 * time.Millisecond, Observer: log})
	waiter := testClient(t, Config{Table: holder.cfg.Table})
	l, err := holder.Acquire(ctx, "stuck", WithMaxHold(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := time.Until(l.Deadline()), 1500*time.Millisecond; got > want {
		t.Errorf("Deadline is %s away, past the maximum hold %s", got, want)
	}
	log.await(t, "a renewal of the stuck holder", is(EventRenewed, "stuck"))
	endedAt := make(chan time.Time, 1)
	context.AfterFunc(l.Context(), func() { endedAt <- time.Now() })

	// Bounded well below the 30 s TTL that the renewals keep extending.
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	w, err := waiter.Acquire(wctx, "stuck")
	if err != nil {
		t.Fatalf("the waiter did not get the lease of a holder past its maximum hold: %v", err)
	}
	got := time.Now()
	cause := context.Cause(l.Context())
	if !errors.Is(cause, ErrHoldLimit) || !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("the holder's cause is %v, want one matching ErrHoldLimit and ErrLeaseLost", cause)
	}
	if ended := pgtest.Receive(t, endedAt, "the end of the holder's lease"); ended.After(got) {
		t.Errorf("the holder's lease ended at %v, not before the waiter acquired at %v", ended, got)
	}
	if w.Token() <= l.Token() {
		t.Errorf("waiter's token %d is not above the holder's %d", w.Token(), l.Token())
	}
	e := log.await(t, "the holder's EventLost", is(EventLost, "stuck"))
	if !errors.Is(e.Err, ErrHoldLimit) {
		t.Errorf("EventLost carries %v, want ErrHoldLimit", e.Err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release after the hold limit: %v", err)
	}
	for _, k := range log.kinds() {
		if k == EventReleased {
			t.Errorf("the lease ended at its hold limit was also reported released: %v", log.kinds())
		}
	}
	if info, err := waiter.Get(ctx, "stuck"); err != nil || info.Token != w.Token() {
		t.Errorf("after the holder's late Release the row is %+v, %v; want the waiter's", info, err)
	}
}

// A semaphore's slots and a set's leases each end at their own maximum
// hold, and the name is free again at once.
func TestMaxHoldEndsSlotsAndSets(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{TTL: 30 * time.Second})
	other := testClient(t, Config{Table: c.cfg.Table})
	s, err := c.Acquire(ctx, "sem", WithSlots(1000), WithMaxHold(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	set, err := c.AcquireAll(ctx, []string{"a", "b"}, WithMaxHold(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Receive(t, s.Context().Done(), "the slot's end at its maximum hold")
	pgtest.Receive(t, set.Context().Done(), "the set's end at its maximum hold")
	for _, ctx := range []context.Context{s.Context(), set.Context()} {
		if cause := context.Cause(ctx); !errors.Is(cause, ErrHoldLimit) {
			t.Errorf("cause %v, want ErrHoldLimit", cause)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := other.AcquireAll(wctx, []string{"a", "b"}); err != nil {
		t.Errorf("the set's names are not free after its maximum hold: %v", err)
	}
}

// An elector whose terms are limited by WithMaxHold ends a term at the
// limit, and steps aside: the other elector leads next.
func TestMaxHoldLimitsAnElectorsTerm(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{TTL: 30 * time.Second})
	b := testClient(t, Config{Table: a.cfg.Table, TTL: 30 * time.Second})
	type term struct {
		who   string
		cause error
	}
	terms := make(chan term, 10)
	elected := make(chan string, 10)
	run := func(c *Client, who string) *Elector {
		e, err := c.NewElector("leader", func(ctx context.Context) error {
			elected <- who
			<-ctx.Done()
			terms <- term{who, context.Cause(ctx)}
			return nil
		}, ElectorConfig{LeaseOptions: []Option{WithMaxHold(time.Second)}, StepDownHoldOff: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ea, eb := run(a, "a"), run(b, "b")
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, e := range []*Elector{ea, eb} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(rctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	first := pgtest.Receive(t, elected, "a first leader")
	end := pgtest.Receive(t, terms, "the first term's end at its maximum hold")
	if end.who != first || !errors.Is(end.cause, ErrHoldLimit) {
		t.Fatalf("the first term (%s) ended as %+v, want its own end with ErrHoldLimit", first, end)
	}
	if next := pgtest.Receive(t, elected, "the next leader"); next == first {
		t.Errorf("%s led again at once after its term reached the maximum hold; the other elector should lead", next)
	}
}

func TestMaxHoldOptionIsChecked(t *testing.T) {
	cfg := Config{TTL: 10 * time.Second}
	for _, opts := range [][]Option{
		{WithMaxHold(0)},
		{WithMaxHold(999 * time.Millisecond)},
		{WithMaxHold(1500*time.Millisecond + time.Microsecond)},
		{WithMaxHold(2 * time.Second), WithMinHold(3 * time.Second)},
	} {
		var ie *InvalidError
		if err := cfg.Validate(opts...); !errors.As(err, &ie) {
			t.Errorf("Validate accepted an invalid maximum hold: %v", err)
		}
	}
	if err := cfg.Validate(WithMaxHold(time.Hour), WithMinHold(time.Second)); err != nil {
		t.Errorf("a maximum hold above the TTL is refused: %v", err)
	}
}
