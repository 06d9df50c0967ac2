package pglease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// Who waits: two clients blocked on a held name are listed in queue order
// with their owners; a waiter whose client is gone drops out at once; the
// first one takes the lease at the release, and the queue is then empty.
// Names nobody waits for, and an invalid name, are what they should be.
func TestWaitersListsTheQueue(t *testing.T) {
	ctx := testCtx(t)
	holder := testClient(t, Config{Owner: "holder"})
	first := testClient(t, Config{Table: holder.cfg.Table, Owner: "first"})
	second := testClient(t, Config{Table: holder.cfg.Table, Owner: "second"})
	l, err := holder.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	waiters := func() []store.Waiter {
		t.Helper()
		ws, err := holder.waiters(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	owners := func(ws []store.Waiter) (out []string) {
		for _, w := range ws {
			out = append(out, w.Owner)
		}
		return out
	}
	got := make(chan *Lease, 2)
	wait := func(c *Client) {
		go func() {
			l, err := c.Acquire(ctx, "job")
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("%s: %v", c.Owner(), err)
			}
			got <- l
		}()
	}
	wait(first)
	pgtest.WaitFor(t, patience, "the first waiter in the queue", func() bool { return len(waiters()) == 1 })
	wait(second)
	pgtest.WaitFor(t, patience, "the second waiter in the queue", func() bool { return len(waiters()) == 2 })
	ws := waiters()
	if o := owners(ws); o[0] != "first" || o[1] != "second" {
		t.Fatalf("queue %v, want [first second]", o)
	}
	for _, w := range ws {
		if w.Name != "job" || w.Since.IsZero() || w.Waited < 0 || w.Waited > time.Minute || w.Kind != "plain" {
			t.Errorf("waiter %+v", w)
		}
	}
	if all, err := holder.waiters(ctx); err != nil || len(all) != 2 {
		t.Errorf("every queue: %v, %v; want the two waiters of job", all, err)
	}
	if none, err := holder.waiters(ctx, "other"); err != nil || len(none) != 0 {
		t.Errorf("the queue of a name nobody waits for: %v, %v", none, err)
	}
	var ie *InvalidError
	if _, err := holder.waiters(ctx, ""); !errors.As(err, &ie) {
		t.Errorf("Waiters of an empty name: %v, want an *InvalidError", err)
	}

	// A waiter whose client is gone is not waiting any more.
	_ = second.Close()
	if l := pgtest.Receive(t, got, "the closed waiter's Acquire"); l != nil {
		t.Fatalf("the closed client got the lease")
	}
	// Its session's end frees its client lock as soon as the server has
	// seen the connection close.
	pgtest.WaitFor(t, patience, "the closed waiter to leave the queue", func() bool {
		o := owners(waiters())
		return len(o) == 1 && o[0] == "first"
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := pgtest.Receive(t, got, "the first waiter's Acquire"); l == nil {
		t.Fatal("the first waiter did not get the lease")
	}
	if ws := waiters(); len(ws) != 0 {
		t.Errorf("the queue after the hand-off: %+v, want empty", ws)
	}
}

// Without a table there is nobody waiting, and Waiters creates nothing.
func TestWaitersWithoutTable(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	ws, err := c.waiters(ctx)
	if err != nil || len(ws) != 0 {
		t.Fatalf("Waiters without a table: %v, %v", ws, err)
	}
	if _, err := c.Get(ctx, "job"); !errors.Is(err, ErrNoLease) {
		t.Fatalf("Get: %v", err)
	}
	var exists bool
	if err := c.db.Query(ctx, "SELECT to_regclass($1) IS NOT NULL", []any{c.cfg.Table}, func(r store.Row) error { return r.Scan(&exists) }); err != nil || exists {
		t.Errorf("after Waiters the table exists: %v, %v", exists, err)
	}
}

// A table of schema version 6 has a waiters table without owners: Migrate
// adds the column, and waiters are listed with their owners again.
func TestVersion6WaitersTableIsMigrated(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "holder"})
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, `ALTER TABLE `+c.st.Names.QualifiedWaiters()+` DROP COLUMN owner`)
	pgtest.Exec(t, `COMMENT ON TABLE `+c.st.Names.QualifiedTable()+` IS 'pglease lease table, schema version 6'`)
	old := testClient(t, Config{Table: c.cfg.Table, DisableAutoMigrate: true})
	if _, err := old.TryAcquire(ctx, "x"); !errors.Is(err, ErrSchema) {
		t.Fatalf("TryAcquire on a version-6 table without migrating: %v, want ErrSchema", err)
	}
	m := testClient(t, Config{Table: c.cfg.Table, Owner: "holder"})
	l, err := m.Acquire(ctx, "job") // migrates
	if err != nil {
		t.Fatal(err)
	}
	w := testClient(t, Config{Table: c.cfg.Table, Owner: "waiter"})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = w.Acquire(wctx, "job") }()
	pgtest.WaitFor(t, patience, "the waiter in the queue", func() bool {
		ws, err := c.waiters(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		return len(ws) == 1 && ws[0].Owner == "waiter"
	})
	_ = l.Release(ctx)
}
