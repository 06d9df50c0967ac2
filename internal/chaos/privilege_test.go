package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

// MinimalGrants is what a role needs to use an existing lease table
// "schema.table" (created by a migration tool or a privileged role with
// DDL / pglease migrate): no superuser, no CREATE anywhere.
func MinimalGrants(schema, table, role string) string {
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	t := pgx.Identifier{schema, table}.Sanitize()
	seq := pgx.Identifier{schema, table + "_token_seq"}.Sanitize()
	w := pgx.Identifier{schema, table + "_waiters"}.Sanitize()
	return fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %s, %s TO %s;
GRANT USAGE ON SEQUENCE %s TO %s;`, s, r, t, w, r, seq, r)
}

// withUser returns dsn with its user replaced.
func withUser(t testing.TB, dsn, user string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}

// restrictedRole creates a LOGIN role with no privileges beyond PUBLIC's,
// dropped when the test ends.
func restrictedRole(t *testing.T, base string) string {
	role := fmt.Sprintf("chaos_app_%d", os.Getpid())
	adminExec(t, base, `DROP ROLE IF EXISTS `+role)
	adminExec(t, base, `CREATE ROLE `+role+` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, base); err == nil {
			_, _ = conn.Exec(ctx, `DROP OWNED BY `+role+`; DROP ROLE IF EXISTS `+role)
			conn.Close(ctx)
		}
	})
	return role
}

// TestMinimalPrivilegeRole runs holders as a role holding only the
// documented grants (MinimalGrants) on a table migrated by another role,
// with faults, and checks that the role could not create anything.
func TestMinimalPrivilegeRole(t *testing.T) {
	base := pgtest.DSN(t)
	role := restrictedRole(t, base)
	r := startRun(t, scenario{holders: 3, dsn: withUser(t, base, role), prepare: func(t *testing.T, r *run) {
		grants := MinimalGrants(r.schema, "leases", role)
		t.Logf("grants:\n%s", grants)
		adminExec(t, r.base, grants)
		// The resource tables are the application's own business.
		adminExec(t, r.base, fmt.Sprintf(`GRANT SELECT, UPDATE ON %[1]s.fence TO %[2]s;
			GRANT INSERT ON %[1]s.writes TO %[2]s; GRANT USAGE ON SEQUENCE %[1]s.writes_seq_seq TO %[2]s`,
			pgx.Identifier{r.schema}.Sanitize(), role))
	}})
	ctx := ctxT(t, time.Minute)

	// Nothing may be created by this role: an auto-migrating client on a
	// new table fails with a permission error, not a half-created schema.
	c, err := pglease.Open(ctx, withUser(t, base, role), pglease.Config{Table: r.schema + ".other"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, "x")
	c.Close()
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("auto-migration of a new table by the restricted role: %v, want permission denied", err)
	}

	r.waitBeliefs(5)
	for range 2 {
		p, _, _ := r.holderOf("job")
		r.kill(p)
		r.spawn()
		r.waitProgress(Now())
	}
	// Admin operations work with the same grants.
	c, err = pglease.Open(ctx, withUser(t, base, role), pglease.Config{Table: r.table})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := admin.List(ctx, c); err != nil {
		t.Errorf("List as restricted role: %v", err)
	}
	if _, err := admin.Cleanup(ctx, c); err != nil {
		t.Errorf("Cleanup as restricted role: %v", err)
	}
	if _, err := admin.ForceRelease(ctx, c, "nobody"); !errors.Is(err, pglease.ErrNoLease) {
		t.Errorf("ForceRelease as restricted role: %v, want ErrNoLease", err)
	}
	r.waitProgress(Now())
	r.finish(Options{})

	var created int
	if err := r.conn().QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = $1)`, role).Scan(&created); err != nil {
		t.Fatal(err)
	}
	if created != 0 {
		t.Errorf("the restricted role owns %d relations", created)
	}
}
