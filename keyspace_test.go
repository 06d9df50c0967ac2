package pglease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// TestOneTableOneKeySpace: every key derived for session or
// per-name locks comes from the table as the server resolves it, never from
// how the user spelled it. Three clients reach one table through three
// spellings: the unqualified default-style name with the table's schema on
// the search_path, the schema-qualified name (with another search_path),
// and the unqualified name behind a search_path that starts with an empty
// schema. While the first holds a name, the others must not get it, in
// both lease modes.
func TestOneTableOneKeySpace(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"Plain", nil}, {"FastFailover", []Option{WithFastFailover()}}} {
		t.Run(mode.name, func(t *testing.T) { oneKeySpace(t, mode.opts) })
	}
}

func oneKeySpace(t *testing.T, opts []Option) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	empty := pgtest.Schema(t) // on the search_path first, holds no table
	const table = "pglease_leases"
	spellings := []struct {
		label  string
		table  string
		params map[string]string
	}{
		{"unqualified, options=-c search_path", table, map[string]string{"options": "-c search_path=" + schema}},
		{"schema-qualified, search_path=public", schema + "." + table, map[string]string{"search_path": "public"}},
		{"unqualified, search_path=<empty schema>,<schema>", table, map[string]string{"search_path": empty + ", " + schema}},
	}
	var clients []*Client
	for i, s := range spellings {
		// Only the first client creates the table: the others must find
		// it, not create a table of their own beside it.
		c, err := Open(ctx, dsnWithParams(t, s.params), Config{Table: s.table, TTL: 5 * time.Second, DisableAutoMigrate: i > 0})
		if err != nil {
			t.Fatalf("Open (%s): %v", s.label, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if i == 0 {
			if err := c.migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		clients = append(clients, c)
	}
	// The spellings really are one table.
	var n int
	if err := pgtest.Pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace IN ($2::regnamespace, $3::regnamespace)`,
		table, schema, empty).Scan(&n); err != nil || n != 1 {
		t.Fatalf("want exactly one %s table in %s and %s, got %d (%v)", table, schema, empty, n, err)
	}

	// Each check on a name of its own, held afresh by the first client, so
	// that one spelling's wrongful takeover does not free the name for the
	// next.
	for i, c := range clients[1:] {
		label := spellings[i+1].label
		for _, blocking := range []bool{false, true} {
			name := fmt.Sprintf("job-%d-%v", i+1, blocking)
			holder, err := clients[0].TryAcquire(ctx, name, opts...)
			if err != nil {
				t.Fatalf("first client (%s): %v", spellings[0].label, err)
			}
			var l *Lease
			if blocking {
				actx, cancel := context.WithTimeout(ctx, time.Second)
				l, err = c.Acquire(actx, name, opts...)
				cancel()
			} else {
				l, err = c.TryAcquire(ctx, name, opts...)
				if err != nil && !errors.Is(err, ErrNotAcquired) {
					t.Errorf("client %q: TryAcquire: %v, want ErrNotAcquired", label, err)
				}
			}
			if err == nil {
				t.Errorf("client %q: %s got %q (token %d) while client %q holds it (token %d)",
					label, map[bool]string{false: "TryAcquire", true: "blocking Acquire"}[blocking], name, l.Token(), spellings[0].label, holder.Token())
				_ = l.Release(ctx)
			} else if err := causeOf(holder.Context()); err != nil {
				t.Errorf("the first client's lease of %q ended: %v", name, err)
			}
			_ = holder.Release(ctx) // fails after a wrongful takeover; that was reported

		}
	}
}
