package chaos

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

// TestPgBouncerRefusesFastFailover: behind PgBouncer in transaction pooling
// mode a session's server backend is shared with every other client, and
// a session advisory lock would be re-entrant for them. FastFailover is
// refused with ErrSessionUnavailable, detected from the backend key the
// pooler answers with, while plain leases work on the same client.
func TestPgBouncerRefusesFastFailover(t *testing.T) {
	bouncer := startPgBouncer(t, pgtest.DSN(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := pgtest.Schema(t) + ".leases"
	c, err := pglease.Open(ctx, bouncer, pglease.Config{Table: table, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, try := range []struct {
		name string
		call func() error
	}{
		{"TryAcquire", func() error { _, err := c.TryAcquire(ctx, "ff", pglease.WithFastFailover()); return err }},
		{"Acquire", func() error { _, err := c.Acquire(ctx, "ff", pglease.WithFastFailover()); return err }},
		{"slots", func() error {
			_, err := c.Acquire(ctx, "ff", pglease.WithFastFailover(), pglease.WithSlots(2))
			return err
		}},
	} {
		err := try.call()
		if !errors.Is(err, pglease.ErrSessionUnavailable) || !strings.Contains(err.Error(), "PgBouncer") {
			t.Fatalf("%s with FastFailover through PgBouncer (transaction pooling): %v, want ErrSessionUnavailable naming the pooler", try.name, err)
		}
	}
	l, err := c.TryAcquire(ctx, "plain")
	if err != nil {
		t.Fatalf("plain lease through PgBouncer: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, err := admin.List(ctx, c); err != nil || len(rows) != 0 {
		t.Fatalf("refused FastFailover attempts left rows behind: %v, %v", rows, err)
	}
}
