package pglease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// Three electors: at most one leads at any instant; a resignation hands
// leadership to another, which Leader and Observe report; Run returns only
// after lead returned.
func TestAtMostOneElectorLeadsAndResignationHandsOver(t *testing.T) {
	ctx := testCtx(t)
	first := testClient(t, Config{})
	var leaders atomic.Int32
	var terms atomic.Int32
	var overlap atomic.Bool
	elected := make(chan int, 100) // the index of each new leader
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
			elected <- i
			<-ctx.Done()
			leaders.Add(-1)
			return nil
		}, ElectorConfig{LeaseOptions: []Option{WithTTL(time.Second)}})
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
	defer func() { cancel(); wg.Wait() }()
	cur := pgtest.Receive(t, elected, "a leader to be elected")
	if !electors[cur].IsLeader() {
		t.Fatal("the elected instance does not report that it leads")
	}
	for info := pgtest.Receive(t, obs, "Observe to report the leader"); info.Owner != clients[cur].Owner(); {
		info = pgtest.Receive(t, obs, "Observe to report the leader")
	}
	info, err := clients[(cur+1)%3].Get(ctx, "leader")
	if err != nil || info.Owner != clients[cur].Owner() || info.Remaining <= 0 {
		t.Fatalf("Get of the election's name = %+v, %v; want a live lease of %s", info, err, clients[cur].Owner())
	}
	electors[cur].Resign()
	if next := pgtest.Receive(t, elected, "another elector to lead after the resignation"); next == cur {
		t.Fatal("the resigned leader led again before anyone else")
	}
	if electors[cur].IsLeader() {
		t.Fatal("the resigned leader still reports that it leads")
	}
	// The observer sees the new leader.
	for info := pgtest.Receive(t, obs, "Observe to report the new leader"); info.Owner == "" || info.Owner == clients[cur].Owner(); {
		info = pgtest.Receive(t, obs, "Observe to report the new leader")
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

// recordHandler sends every log record's message and attributes to a
// channel, dropping records when nobody reads.
type recordHandler struct{ out chan<- slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.out <- r.Clone():
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// An error the lead function returns while it still leads is logged
// through the client's logger, with the error, and the campaign goes on.
func TestElectorLogsLeadErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	records := make(chan slog.Record, 64)
	c := testClient(t, Config{Logger: slog.New(recordHandler{records})})
	boom := errors.New("boom")
	terms := make(chan struct{}, 8)
	e, err := c.NewElector("logged", func(context.Context) error {
		select {
		case terms <- struct{}{}:
		default:
		}
		return boom
	}, ElectorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	timeout := time.After(30 * time.Second)
	for logged := false; !logged; {
		select {
		case r := <-records:
			if r.Message != "pglease: leader function failed" {
				continue
			}
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "err" {
					logged = errors.Is(a.Value.Any().(error), boom)
				}
				return !logged
			})
		case <-timeout:
			t.Fatal("the lead function's error was never logged")
		}
	}
	// The campaign continued: a second term began.
	for n := 0; n < 2; n++ {
		select {
		case <-terms:
		case <-timeout:
			t.Fatalf("only %d terms began; the campaign stopped after an error", n)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}
