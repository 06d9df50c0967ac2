package pglease

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// A role whose synchronous_commit is off (set by an administrator, for
// another application's sake) must not make acquisitions and renewals
// asynchronous: lost in a crash, an acquisition's token could be handed
// out again, a renewal's extension forgotten while its holder relies on
// it. Each call's commit is flushed before the call returns: the server's
// WAL flush position has passed where WAL insertion stood before the call.
// (An asynchronous commit is flushed by the WAL writer up to 200 ms
// later.)
func TestRolesAsynchronousCommitDoesNotWeakenLeases(t *testing.T) {
	ctx := testCtx(t)
	role := fmt.Sprintf("async_%d", time.Now().UnixNano())
	pgtest.Exec(t, "CREATE ROLE "+role+" LOGIN SUPERUSER")
	pgtest.Exec(t, "ALTER ROLE "+role+" SET synchronous_commit = off")
	t.Cleanup(func() { pgtest.Exec(t, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	c, err := Open(ctx, u.String(), Config{Table: pgtest.Schema(t) + ".leases", DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if v := pgtest.Value[string](t, "SELECT setting FROM pg_db_role_setting s, unnest(s.setconfig) AS setting WHERE s.setrole = $1::regrole", role); v != "synchronous_commit=off" {
		t.Fatalf("role setting %q", v)
	}
	flushed := func(what string, run func() error) {
		t.Helper()
		before := pgtest.Value[string](t, "SELECT pg_current_wal_insert_lsn()::text")
		if err := run(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !pgtest.Value[bool](t, "SELECT pg_current_wal_flush_lsn() > $1::pg_lsn", before) {
			t.Errorf("%s returned before its commit was flushed (the role's synchronous_commit = off)", what)
		}
	}
	var l *Lease
	flushed("TryAcquire", func() (err error) { l, err = c.TryAcquire(ctx, "a", WithTTL(time.Minute)); return err })
	flushed("Renew", func() error { return l.Renew(ctx) })
	flushed("TryAcquire with fast failover", func() error {
		_, err := c.TryAcquire(ctx, "f", WithTTL(time.Minute), WithFastFailover())
		return err
	})
	flushed("TryAcquireAll", func() error { _, err := c.TryAcquireAll(ctx, []string{"s1", "s2"}); return err })
}
