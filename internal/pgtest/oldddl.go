package pgtest

import (
	"embed"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// oldDDL holds the DDL that earlier versions of pglease exported, one file
// per schema version (ddl/vN.sql), each for the table
// "pglease_fixture"."leases", as admin.DDL printed it at the commit its
// header names.
//
//go:embed ddl/*.sql
var oldDDL embed.FS

// OldSchemaVersions names the earlier schema versions CreateOldTable can
// create, oldest first: "1" to "7", and "3-early", the first form of
// version 3 (its waiters table had no notified_at column yet).
var OldSchemaVersions = []string{"1", "2", "3-early", "3", "4", "5", "6", "7"}

// CreateOldTable creates schema.leases and its objects with the DDL that
// pglease exported at schema version v (one of OldSchemaVersions, or "9",
// 703758e's: its fence refuses the plain INSERTs that upgrade tests of the
// others make, so it is not listed), as a user's migration tool would
// have applied it.
func CreateOldTable(t testing.TB, schema, v string) {
	t.Helper()
	b, err := oldDDL.ReadFile("ddl/v" + v + ".sql")
	if err != nil {
		t.Fatalf("pgtest: no DDL of schema version %s: %v", v, err)
	}
	Exec(t, strings.ReplaceAll(string(b), `"pglease_fixture"`, pgx.Identifier{schema}.Sanitize()))
}
