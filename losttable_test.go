package pglease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/pgtest"
)

// A lease table lost while clients use it (dropped, or missing on a new
// primary after a failover, or in a restored database; issue 41 item 12):
// the leases held in it end at once, saying why, rather than renew into
// errors until their TTL; a release of one whose client has not noticed
// yet succeeds (its row went with the table); a client that may not
// migrate fails at once with ErrNoTable, saying so; and the next
// acquisition of a client that migrates creates the table anew and is
// granted, rather than failing, with a token above every token the lost
// table handed out.
func TestALostTableEndsItsLeasesAndIsCreatedAnew(t *testing.T) {
	for _, fast := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fast-failover"}[fast], func(t *testing.T) {
			testALostTable(t, fast)
		})
	}
}

func testALostTable(t *testing.T, fast bool) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	table := schema + ".leases"
	// The TTL outlasts patience: a lease that ended only at its deadline
	// would fail the test.
	ttl := 3 * patience
	opts := []Option{WithTTL(ttl)}
	if fast {
		opts = append(opts, WithFastFailover())
	}
	holder := testClient(t, Config{Table: table, RenewInterval: 200 * time.Millisecond})
	unaware := testClient(t, Config{Table: table}) // renews every ttl/3: it does not notice the loss before it releases
	strict := testClient(t, Config{Table: table, DisableAutoMigrate: true})
	other := testClient(t, Config{Table: table})
	setter := testClient(t, Config{Table: table})
	var before int64 // the largest token handed out before the loss
	take := func(c *Client, name string) *Lease {
		t.Helper()
		l, err := c.TryAcquire(ctx, name, opts...)
		if err != nil {
			t.Fatalf("TryAcquire %q: %v", name, err)
		}
		before = max(before, l.Token())
		return l
	}
	// Every client uses the table first.
	for i, c := range []*Client{holder, unaware, strict, other, setter} {
		if err := take(c, fmt.Sprintf("warm-%d", i)).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held := take(holder, "job")
	kept := take(unaware, "kept")
	dropSchema(t, schema)

	select {
	case <-held.Context().Done():
	case <-time.After(patience):
		t.Fatalf("the lease held in the lost table did not end within %v (its TTL is %v)", patience, ttl)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, ErrLeaseLost) || !strings.Contains(cause.Error(), "no longer exists") {
		t.Fatalf("the lease held in the lost table ended with %v, want ErrLeaseLost saying the table no longer exists", cause)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release of the lost lease: %v", err)
	}
	if err := kept.Release(ctx); err != nil {
		t.Fatalf("Release of a lease whose row went with its table: %v, want nil", err)
	}

	// A client that may not migrate: at once, and true.
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"TryAcquire", func(ctx context.Context) error { _, err := strict.TryAcquire(ctx, "job"); return err }},
		{"Acquire", func(ctx context.Context) error { _, err := strict.Acquire(ctx, "job"); return err }},
		{"AcquireAll", func(ctx context.Context) error { _, err := strict.AcquireAll(ctx, []string{"s1", "s2"}); return err }},
	} {
		cctx, cancel := context.WithTimeout(ctx, patience)
		err := call.do(cctx)
		waited := cctx.Err()
		cancel()
		if !errors.Is(err, ErrNoTable) || waited != nil {
			t.Fatalf("%s with DisableAutoMigrate after the loss: %v (context: %v), want ErrNoTable at once", call.name, err, waited)
		}
		for _, want := range []string{strict.st.Names.QualifiedTable() + " no longer exists", "dropped, or lost in a failover or a restore", "pglease migrate", "DisableAutoMigrate is set"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s with DisableAutoMigrate after the loss: %q lacks %q", call.name, err, want)
			}
		}
	}

	// The next acquisition creates the table anew, and is granted.
	l, err := other.Acquire(ctx, "job", opts...)
	if err != nil {
		t.Fatalf("Acquire after the loss: %v, want the table created anew and the lease granted", err)
	}
	defer l.Release(ctx)
	if l.Token() <= before {
		t.Fatalf("token %d after the loss, not above %d handed out before it", l.Token(), before)
	}
	set, err := setter.AcquireAll(ctx, []string{"s1", "s2"}, WithTTL(ttl))
	if err != nil {
		t.Fatalf("AcquireAll after the loss: %v", err)
	}
	defer set.Release(ctx)
	for _, c := range []*Client{holder, strict} {
		l, err := c.TryAcquire(ctx, "after-"+c.Owner()+fmt.Sprint(c == strict), opts...)
		if err != nil {
			t.Fatalf("TryAcquire once the table is back (DisableAutoMigrate %v): %v", c.cfg.DisableAutoMigrate, err)
		}
		if l.Token() <= before {
			t.Fatalf("token %d after the loss, not above %d", l.Token(), before)
		}
		_ = l.Release(ctx)
	}
}

// A client waiting for a lease when the table is lost is not stranded: it
// creates the table anew and acquires the lease (the holder's lease ends
// with the table), with a token above every earlier one.
func TestAWaiterOutlivesALostTable(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	table := schema + ".leases"
	holder := testClient(t, Config{Table: table, RenewInterval: 200 * time.Millisecond})
	waiter := testClient(t, Config{Table: table, PollInterval: 300 * time.Millisecond})
	held, err := holder.TryAcquire(ctx, "job", WithTTL(3*patience))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var l *Lease
	go func() {
		var err error
		l, err = waiter.Acquire(ctx, "job")
		got <- err
	}()
	waitSubscribed(t, waiter, "job", 1)
	dropSchema(t, schema)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Acquire after the loss: %v, want the lease", err)
		}
	case <-time.After(patience):
		t.Fatalf("the waiter did not acquire within %v of the loss", patience)
	}
	defer l.Release(ctx)
	if l.Token() <= held.Token() {
		t.Fatalf("the waiter's token %d is not above the lost holder's %d", l.Token(), held.Token())
	}
	select {
	case <-held.Context().Done():
	case <-time.After(patience):
		t.Fatalf("the holder's lease did not end within %v of the loss", patience)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("the holder's lease ended with %v, want ErrLeaseLost", cause)
	}
}

// A client that may not migrate, on a table that was never created, is
// told that it does not exist, not that a table of another layout does.
func TestANeverCreatedTableWithoutAutoMigration(t *testing.T) {
	c := testClient(t, Config{Table: pgtest.Schema(t) + ".leases", DisableAutoMigrate: true})
	_, err := c.TryAcquire(testCtx(t), "x")
	if !errors.Is(err, ErrNoTable) || !strings.Contains(err.Error(), c.st.Names.QualifiedTable()+" does not exist") || !strings.Contains(err.Error(), "pglease migrate") {
		t.Fatalf("TryAcquire on a table never created, DisableAutoMigrate: %v, want ErrNoTable saying it does not exist", err)
	}
}

// dropSchema drops schema and everything in it, as an operator would
// while clients run: a DROP that takes its locks while a client's
// statement takes the same ones in another order may end in a deadlock,
// which the operator retries.
func dropSchema(t *testing.T, schema string) {
	t.Helper()
	conn := pgtest.Conn(t)
	for try := 1; ; try++ {
		_, err := conn.Exec(testCtx(t), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		var pgErr *pgconn.PgError
		if err == nil || try == 10 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			if err != nil {
				t.Fatalf("DROP SCHEMA %s (try %d): %v", schema, try, err)
			}
			return
		}
	}
}
