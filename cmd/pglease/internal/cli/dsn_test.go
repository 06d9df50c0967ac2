package cli

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The messages name the server as libpq reads the settings: a host and
// port, or a Unix socket; the database, the role's name when none is
// given.
func TestDescribeServer(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://app@db.example:6432/orders", "database orders on db.example:6432 as app"},
		{"host=/run/postgresql port=5433 user=ops", "database ops on /run/postgresql/.s.PGSQL.5433 as ops"},
		{"postgres://app@[::1]/x", "database x on [::1]:5432 as app"},
	} {
		cfg, err := pgconn.ParseConfig(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := describeServer(cfg); got != tc.want {
			t.Errorf("describeServer(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}
