package pgleasegocron

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

func testClient(t *testing.T, table, owner string) *pglease.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A job's lock is its lease: held, the other replicas' Locks fail with
// ErrNotAcquired; kept for the minimum hold past Unlock; a lease lost
// during the run makes Unlock say so.
func TestLocker(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ctx := context.Background()
	a := NewLocker(testClient(t, table, "a"))
	b := NewLocker(testClient(t, table, "b"), pglease.WithMinHold(10*time.Second))
	k, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, pglease.ErrNotAcquired) {
		t.Fatalf("Lock of a held job: %v; want ErrNotAcquired", err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	k, err = b.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// b's run ended, but its lease is kept for its minimum hold.
	if _, err := a.Lock(ctx, "job"); !errors.Is(err, pglease.ErrNotAcquired) {
		t.Fatalf("Lock within the previous run's minimum hold: %v; want ErrNotAcquired", err)
	}

	k, err = a.Lock(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	operator := testClient(t, table, "operator")
	if _, err := admin.ForceRelease(ctx, operator, LeasePrefix+"other"); err != nil {
		t.Fatal(err)
	}
	if err := k.(lock).lease.Renew(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Renew after a forced release: %v", err)
	}
	if err := k.Unlock(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Unlock of a lost lease: %v; want ErrLeaseLost", err)
	}
}

// One of two electors leads; when it stops, the other does.
func TestElector(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ctx := context.Background()
	var els []*Elector
	var stops []context.CancelFunc
	var dones []chan struct{}
	for _, owner := range []string{"a", "b"} {
		el, err := NewElector(testClient(t, table, owner), "leader", pglease.ElectorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = el.Run(rctx); close(done) }()
		t.Cleanup(func() { stop(); <-done })
		els, stops, dones = append(els, el), append(stops, stop), append(dones, done)
	}
	leader := -1
	pgtest.WaitFor(t, pgtest.Patience, "a leader", func() bool {
		for i, el := range els {
			if el.IsLeader(ctx) == nil {
				leader = i
				return true
			}
		}
		return false
	})
	other := 1 - leader
	if err := els[other].IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("IsLeader of the follower: %v; want ErrNotLeader", err)
	}
	stops[leader]()
	<-dones[leader]
	if err := els[leader].IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("IsLeader after Run returned: %v", err)
	}
	pgtest.WaitFor(t, pgtest.Patience, "the other elector to lead", func() bool {
		return els[other].IsLeader(ctx) == nil
	})
	if _, err := NewElector(testClient(t, table, "c"), "leader", pglease.ElectorConfig{LeaseOptions: []pglease.Option{pglease.WithSlots(2)}}); !errors.As(err, new(*pglease.InvalidError)) {
		t.Fatalf("NewElector with slots: %v; want an *InvalidError", err)
	}
}
