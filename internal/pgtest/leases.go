package pgtest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Leases reads and writes one pglease lease table directly, past the
// client: to see a row as the server has it, to age it, or to plant or lock
// a row as no client would. Each method runs on a short-lived superuser
// connection and fails the test on error; call them from the test's
// goroutine.
type Leases struct {
	t     testing.TB
	dsn   string
	table string // quoted, schema-qualified as given
	given string // as given
}

// LeaseTable returns the lease table "[schema.]table" (as pglease's
// Config.Table names it) on the server at dsn, usually DSN(t).
func LeaseTable(t testing.TB, dsn, table string) *Leases {
	return &Leases{t: t, dsn: dsn, table: pgx.Identifier(strings.Split(table, ".")).Sanitize(), given: table}
}

// Name is the table's quoted, qualified name, for SQL of a test's own.
func (l *Leases) Name() string { return l.table }

// Row is a lease row as the server has it.
type Row struct {
	Name, Owner string
	Token       int64
	ExpiresAt   time.Time
	RenewedAt   time.Time
	Held        bool   // not expired when read (server clock)
	Metadata    string // JSON object
}

// Get returns the row of name, and false when there is none.
func (l *Leases) Get(name string) (Row, bool) {
	l.t.Helper()
	r := Row{Name: name}
	found := true
	withConnTo(l.t, l.dsn, func(ctx context.Context, conn *pgx.Conn) error {
		err := conn.QueryRow(ctx, `SELECT "owner", "token", "expires_at", "renewed_at", "expires_at" > now(), "metadata"::text
			FROM `+l.table+` WHERE "name" = $1`, name).Scan(&r.Owner, &r.Token, &r.ExpiresAt, &r.RenewedAt, &r.Held, &r.Metadata)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
			return nil
		}
		return err
	})
	return r, found
}

// Held returns the names of the rows that have not expired, whose names
// start with prefix.
func (l *Leases) Held(prefix string) []string {
	l.t.Helper()
	var names []string
	withConnTo(l.t, l.dsn, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT "name" FROM `+l.table+`
			WHERE starts_with("name", $1) AND "expires_at" > now() ORDER BY "name"`, prefix)
		if err != nil {
			return err
		}
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return names
}

// Count returns the number of rows, held or expired.
func (l *Leases) Count() int {
	l.t.Helper()
	var n int
	queryRow(l.t, l.dsn, `SELECT count(*) FROM `+l.table, nil, &n)
	return n
}

// Version returns the schema version the table's comment records (0 when
// it records none).
func (l *Leases) Version() int {
	l.t.Helper()
	var v int
	queryRow(l.t, l.dsn, `SELECT coalesce(substring(obj_description(to_regclass($1::text), 'pg_class')
		FROM 'schema version ([0-9]+)'), '0')::int`, []any{l.table}, &v)
	return v
}

// MaxToken returns the largest token in the table (0 when it is empty).
func (l *Leases) MaxToken() int64 {
	l.t.Helper()
	var n int64
	queryRow(l.t, l.dsn, `SELECT coalesce(max("token"), 0) FROM `+l.table, nil, &n)
	return n
}

// ExpiresAt returns the expiry of name's row (server time).
func (l *Leases) ExpiresAt(name string) time.Time {
	l.t.Helper()
	var at time.Time
	queryRow(l.t, l.dsn, `SELECT "expires_at" FROM `+l.table+` WHERE "name" = $1`, []any{name}, &at)
	return at
}

// SetExpiry makes name's row expire in d from now (server clock); a
// negative d makes it expired already.
func (l *Leases) SetExpiry(name string, d time.Duration) {
	l.t.Helper()
	l.update(name, `"expires_at" = now() + $2 * interval '1 millisecond'`, d.Milliseconds())
}

// SetHeartbeatAge makes name's row look last renewed d ago.
func (l *Leases) SetHeartbeatAge(name string, d time.Duration) {
	l.t.Helper()
	l.update(name, `"renewed_at" = now() - $2 * interval '1 millisecond'`, d.Milliseconds())
}

func (l *Leases) update(name, set string, arg any) {
	l.t.Helper()
	withConnTo(l.t, l.dsn, func(ctx context.Context, conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, `UPDATE `+l.table+` SET `+set+` WHERE "name" = $1`, name, arg)
		if err == nil && tag.RowsAffected() != 1 {
			l.t.Fatalf("pgtest: %s has no row %q", l.table, name)
		}
		return err
	})
}

// Insert writes a row of name held by owner with token, expiring ttl from
// now, with metadata (a JSON object; "" for none), as an acquisition would
// but without its checks: a row whose reply a client never got, or a row of
// an older table layout (only the columns every layout has are written).
func (l *Leases) Insert(name, owner string, token int64, ttl time.Duration, metadata string) {
	l.t.Helper()
	if metadata == "" {
		metadata = "{}"
	}
	withConnTo(l.t, l.dsn, func(ctx context.Context, conn *pgx.Conn) error {
		// Written as this version's acquisitions write (the fence of
		// schema version 9 refuses others), with the table's version.
		if _, err := conn.Exec(ctx, `SELECT set_config('pglease.writer', coalesce(substring(
			obj_description(to_regclass($1::text), 'pg_class') FROM 'schema version ([0-9]+)'), '0'), false)`, l.table); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, `INSERT INTO `+l.table+`
			("name", "owner", "token", "acquired_at", "renewed_at", "expires_at", "hold_until", "ttl", "metadata")
			VALUES ($1, $2, $3, now(), now(), now() + $4 * interval '1 millisecond', now(),
			        $4 * interval '1 millisecond', $5::jsonb)`,
			name, owner, token, ttl.Milliseconds(), metadata)
		return err
	})
}

// InsertOfKind writes a live row of name of any kind, as an acquisition
// of schema version 10 or later writes one but without its checks: kind is the
// word the "kind" column records (a kind a later version may add
// included), of the name the row belongs to ("semaphore"; "" for NULL),
// size its kind's size ("slots") and weight the units of it the row
// takes. The row is held by owner with token for ttl. The table must be of
// schema version 10 or later (the fence lets the transaction write as its
// acquisitions do, marked with the version its comment records).
func (l *Leases) InsertOfKind(name, owner string, token int64, ttl time.Duration, kind, of string, size, weight int) {
	l.t.Helper()
	version := strconv.Itoa(l.Version())
	withConnTo(l.t, l.dsn, func(ctx context.Context, conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('pglease.writer', $1, true)`, version); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+l.table+`
				("name", "owner", "token", "acquired_at", "renewed_at", "expires_at", "hold_until", "ttl",
				 "kind", "semaphore", "slots", "weight")
				VALUES ($1, $2, $3, now(), now(), now() + $4 * interval '1 millisecond', now(),
				        $4 * interval '1 millisecond', $5, nullif($6, ''), $7, $8)`,
				name, owner, token, ttl.Milliseconds(), kind, of, size, weight)
			return err
		})
	})
}

// QueueShared registers owner as waiting for name as a shared lease's
// wait does (the waiters table's "shared"), live for a minute without a
// session of its own (a polling registration), so that readers list it.
func (l *Leases) QueueShared(name, owner string) {
	l.t.Helper()
	withConnTo(l.t, l.dsn, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO `+l.waiters()+`
			("name", "client", "since", "expires_at", "owner", "shared", "polling")
			VALUES ($1, 'test-' || $2, now(), now() + interval '1 minute', $2, true, true)`, name, owner)
		return err
	})
}

// waiters is the quoted, qualified name of the table's waiters table.
func (l *Leases) waiters() string {
	id := pgx.Identifier(strings.Split(l.given, "."))
	id[len(id)-1] += "_waiters"
	return id.Sanitize()
}

// LockRow locks name's row (SELECT … FOR UPDATE) in a transaction of a
// connection of its own, as a guarded transaction or an operator's session
// would, until unlock is called or the test ends.
func (l *Leases) LockRow(name string) (unlock func()) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, l.dsn)
	if err != nil {
		l.t.Fatalf("pgtest: connect: %v", err)
	}
	var n int
	if _, err = conn.Exec(ctx, "BEGIN"); err == nil {
		err = conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+l.table+` WHERE "name" = $1 FOR UPDATE) AS locked`, name).Scan(&n)
	}
	if err != nil || n != 1 {
		_ = conn.Close(context.Background())
		l.t.Fatalf("pgtest: lock row %q of %s: %d rows, %v", name, l.table, n, err)
	}
	done := false
	unlock = func() {
		if !done {
			done = true
			_ = conn.Close(context.Background()) // rolls back
		}
	}
	l.t.Cleanup(unlock)
	return unlock
}
