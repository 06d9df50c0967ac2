package pgleasetest_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/pgleasetest"
)

// A cluster accepts connections once Start returns, keeps its settings
// across a restart, and Close removes its directory.
func TestClusterStartsRestartsAndCleansUp(t *testing.T) {
	if _, err := pgleasetest.FindBinaries(); errors.Is(err, pgleasetest.ErrNoBinaries) {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgleasetest.Start(ctx, pgleasetest.Options{Settings: map[string]string{"application_name": "pgleasetest"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Exec(ctx, "CREATE DATABASE other"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.DSN("other"))
	if err != nil {
		t.Fatal(err)
	}
	var app string
	err = conn.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app)
	_ = conn.Close(ctx)
	if err != nil || app != "pgleasetest" {
		t.Fatalf("application_name = %q, %v; want the setting given to Start", app, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.DataDir()); !os.IsNotExist(err) {
		t.Fatalf("the data directory survived Close: %v", err)
	}
}
