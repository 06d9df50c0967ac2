package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.ExportDatabaseURL = true
	pgtest.Main(m)
}

func open(t *testing.T, table, owner string, disableMigrate bool) *pglease.Client {
	t.Helper()
	c, err := pglease.Open(context.Background(), pgtest.DSN(t), pglease.Config{Table: table, Owner: owner, DisableAutoMigrate: disableMigrate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Each function reaches its client's table: before the table exists, the
// reads find nothing and the writes change nothing; Migrate creates it;
// then each sees and acts on what clients did.
func TestEveryFunctionActsOnItsClientsTable(t *testing.T) {
	ctx := ctxOf(t)
	table := pgtest.Schema(t) + ".leases"
	ops := open(t, table, "operator", true)

	if ok, err := admin.TableExists(ctx, ops); ok || err != nil {
		t.Fatalf("TableExists without a table: %v, %v; want false, nil", ok, err)
	}
	if infos, err := admin.List(ctx, ops); err != nil || len(infos) != 0 {
		t.Fatalf("List without a table: %v, %v; want none, nil", infos, err)
	}
	if ws, err := admin.Waiters(ctx, ops); err != nil || len(ws) != 0 {
		t.Fatalf("Waiters without a table: %v, %v; want none, nil", ws, err)
	}
	if _, err := admin.ForceRelease(ctx, ops, "job"); !errors.Is(err, pglease.ErrNoTable) {
		t.Fatalf("ForceRelease without a table: %v, want ErrNoTable", err)
	}
	if _, err := admin.Cleanup(ctx, ops); !errors.Is(err, pglease.ErrNoTable) {
		t.Fatalf("Cleanup without a table: %v, want ErrNoTable", err)
	}
	if pgtest.RelationExists(t, table) {
		t.Fatal("a read or a refused write created the table")
	}
	if err := admin.Migrate(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if !pgtest.RelationExists(t, table) {
		t.Fatal("Migrate did not create the table")
	}
	if ok, err := admin.TableExists(ctx, ops); !ok || err != nil {
		t.Fatalf("TableExists after Migrate: %v, %v; want true, nil", ok, err)
	}

	holder := open(t, table, "holder", true)
	waiter := open(t, table, "waiter", true)
	lease, err := holder.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := admin.List(ctx, ops)
	if err != nil || len(infos) != 1 || infos[0].Name != "job" || infos[0].Owner != "holder" || infos[0].Token != lease.Token() || infos[0].Remaining <= 0 {
		t.Fatalf("List: %+v, %v; want job held by holder with token %d", infos, err, lease.Token())
	}

	got := make(chan *pglease.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "job")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	var ws []admin.Waiter
	pgtest.WaitFor(t, 30*time.Second, "the waiter to be listed", func() bool {
		ws, err = admin.Waiters(ctx, ops, "job")
		return err == nil && len(ws) == 1
	})
	if w := ws[0]; w.Name != "job" || w.Owner != "waiter" || w.Kind != "plain" || w.Since.IsZero() || w.Waited < 0 {
		t.Fatalf("Waiters: %+v, want the waiter of job", w)
	}

	in, err := admin.ForceRelease(ctx, ops, "job")
	if err != nil || in.Owner != "holder" || in.Token != lease.Token() {
		t.Fatalf("ForceRelease: %+v, %v; want the holder's row", in, err)
	}
	next := pgtest.Receive(t, got, "the waiter's lease after the forced release")
	if next == nil || next.Token() <= lease.Token() {
		t.Fatalf("the waiter got %v after the forced release", next)
	}
	if _, err := admin.ForceRelease(ctx, ops, "nothing"); !errors.Is(err, pglease.ErrNoLease) {
		t.Fatalf("ForceRelease of a name without a row: %v, want ErrNoLease", err)
	}

	if _, err := holder.TryAcquire(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	pgtest.LeaseTable(t, pgtest.DSN(t), table).SetExpiry("old", -time.Second)
	if n, err := admin.Cleanup(ctx, ops); err != nil || n != 1 {
		t.Fatalf("Cleanup: %d, %v; want the 1 expired row deleted", n, err)
	}
	if infos, err := admin.List(ctx, ops); err != nil || len(infos) != 1 || infos[0].Name != "job" {
		t.Fatalf("List after Cleanup: %+v, %v; want the held job alone", infos, err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The DDL creates a table clients use as it is, refuses a bad name, and
// runs twice without harm.
func TestDDLMakesATableClientsUse(t *testing.T) {
	if _, err := admin.DDL(`bad"name`); !errors.As(err, new(*pglease.InvalidError)) {
		t.Fatalf("DDL of a bad name: %v, want an *InvalidError", err)
	}
	table := pgtest.Schema(t) + ".mig"
	ddl, err := admin.DDL(table)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS") {
		t.Fatalf("DDL creates no table:\n%s", ddl)
	}
	pgtest.Exec(t, ddl)
	pgtest.Exec(t, ddl)
	c := open(t, table, "app", true)
	l, err := c.TryAcquire(ctxOf(t), "x")
	if err != nil {
		t.Fatalf("TryAcquire on the DDL's table: %v", err)
	}
	l.Release(ctxOf(t))
}

// A closed client is refused by every function that uses it.
func TestAClosedClientIsRefused(t *testing.T) {
	ctx := ctxOf(t)
	c := open(t, pgtest.Schema(t)+".leases", "closed", false)
	c.Close()
	for name, call := range map[string]func() error{
		"Migrate":      func() error { return admin.Migrate(ctx, c) },
		"List":         func() error { _, err := admin.List(ctx, c); return err },
		"Waiters":      func() error { _, err := admin.Waiters(ctx, c); return err },
		"ForceRelease": func() error { _, err := admin.ForceRelease(ctx, c, "x"); return err },
		"Cleanup":      func() error { _, err := admin.Cleanup(ctx, c); return err },
	} {
		if err := call(); !errors.Is(err, pglease.ErrClosed) {
			t.Errorf("%s on a closed client: %v, want ErrClosed", name, err)
		}
	}
}
