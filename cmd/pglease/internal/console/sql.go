package console

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/cmd/pglease/internal/queue"
)

// The console's own SQL: what it reads besides the rows, which it reads
// with admin.List. Every value is a bind parameter; the one
// identifier, the channel of LISTEN, was checked by pglease.Config.Validate
// and is quoted.
const (
	// clockSQL reads the server's clock and whether the lease table
	// exists ($1 as to_regclass reads it). It reads the catalog only.
	clockSQL = `SELECT now(), to_regclass($1::text) IS NOT NULL`
	// tokensSQL reads the token sequence's last value ($1 as to_regclass
	// reads it; 0 when the sequence does not exist or was never used).
	// Every acquisition attempt draws from it, so the console re-reads the
	// table when it moved: one tuple, however many rows. It needs SELECT
	// or USAGE on the sequence (42501 without).
	tokensSQL = `SELECT coalesce(pg_sequence_last_value(to_regclass($1::text)), 0)::bigint`
)

// objects are the database objects of one lease table that the console
// reads, named as pglease names them (docs/OPERATIONS.md).
type objects struct {
	table   string // quoted and schema-qualified, as to_regclass reads it
	seq     string // the token sequence, TABLE_token_seq, likewise
	channel string // the table's notification channel: its name, unqualified
}

// objectsOf returns the objects of the lease table "[schema.]table" ("" for
// the default), or the error pglease.Config.Validate returns for it.
func objectsOf(table string) (objects, error) {
	if err := (pglease.Config{Table: table}).Validate(); err != nil {
		return objects{}, err
	}
	if table == "" {
		table = "pglease_leases" // pglease.Config.Table's default
	}
	prefix, name := "", table
	if schema, rest, ok := strings.Cut(table, "."); ok {
		prefix, name = quote(schema)+".", rest
	}
	return objects{table: prefix + quote(name), seq: prefix + quote(derived(name, "_token_seq")), channel: name}, nil
}

// quote returns s as a quoted SQL identifier. s has been validated, so the
// quoting is belt and braces.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// derived appends suffix to base, keeping the result within PostgreSQL's
// 63-byte identifier limit as pglease does when it names a table's
// objects: long bases are shortened and made unique by a hash of the full
// base (32-bit FNV-1a).
func derived(base, suffix string) string {
	if len(base)+len(suffix) <= 63 {
		return base + suffix
	}
	h := uint32(2166136261)
	for i := 0; i < len(base); i++ {
		h ^= uint32(base[i])
		h *= 16777619
	}
	tag := fmt.Sprintf("_%08x", h)
	return base[:63-len(suffix)-len(tag)] + tag + suffix
}

// read is one read of the table: the server's clock, whether the table
// exists and, if it does, its rows and who waits for them.
type read struct {
	Now    time.Time
	Exists bool
	Leases []pglease.Info
	// Queues are the waiters of each name (queue.ByName); nil when the
	// role may not read the waiters table.
	Queues map[string][]admin.Waiter
}

// readTable reads the server's clock and whether the table exists, then
// its rows and its queues. It only reads, and needs SELECT on the table
// (and on its waiters table for the queues). A table dropped meanwhile
// reads as empty.
func readTable(ctx context.Context, pool *pgxpool.Pool, client *pglease.Client, o objects) (read, error) {
	var r read
	if err := pool.QueryRow(ctx, clockSQL, o.table).Scan(&r.Now, &r.Exists); err != nil || !r.Exists {
		return r, err
	}
	var err error
	if r.Leases, err = admin.List(ctx, client); err != nil {
		return r, err
	}
	r.Queues, err = readQueues(ctx, client)
	return r, err
}

// readQueues reads who waits for what: nil, and no error, when the role
// may not read the waiters table.
func readQueues(ctx context.Context, client *pglease.Client) (map[string][]admin.Waiter, error) {
	ws, err := admin.Waiters(ctx, client)
	if privilege(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return queue.ByName(ws), nil
}

// tokenSequence reads the last value of the token sequence.
func tokenSequence(ctx context.Context, pool *pgxpool.Pool, o objects) (int64, error) {
	var v int64
	err := pool.QueryRow(ctx, tokensSQL, o.seq).Scan(&v)
	return v, err
}

// privilege reports whether err is the server's refusal for want of a
// privilege (SQLSTATE 42501).
func privilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}
