package pglease

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pglease/pglease/internal/store"
)

// Server errors get a hint that says what to do; the cause stays reachable.
func TestServerErrorsCarryAHintAndTheirCause(t *testing.T) {
	for code, want := range map[string]string{
		"42501": "privilege",
		"42P01": "pglease migrate",
		"28P01": "password",
		"3D000": "database does not exist",
		"53200": "max_locks_per_transaction",
		"08006": "unreachable",
	} {
		cause := &pgconn.PgError{Code: code}
		err := opError("acquire", cause)
		if !strings.Contains(err.Error(), want) || !errors.Is(err, cause) {
			t.Errorf("%s: %v, want a hint containing %q", code, err, want)
		}
	}
	err := opError("check", &store.SchemaError{Msg: "column x"})
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "column x") {
		t.Errorf("schema error: %v", err)
	}
}
