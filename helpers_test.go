package pglease

import (
	"context"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newClient returns a client on a fresh schema, closed at cleanup.
func testClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = pgtest.Schema(t) + ".leases"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, pgtest.DSN(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
