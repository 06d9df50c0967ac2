package pglease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
