package store

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Row is one result row.
type Row interface{ Scan(dest ...any) error }

// rows is what pgx.Rows and *sql.Rows have in common.
type rows interface {
	Row
	Next() bool
	Err() error
}

// each calls scan for every row, then reports the iteration's error.
func each(rs rows, scan func(Row) error) error {
	for rs.Next() {
		if err := scan(rs); err != nil {
			return err
		}
	}
	return rs.Err()
}

// Querier runs one statement. It is implemented for pgx (pools, connections,
// transactions) and database/sql (DB, Conn, Tx).
type Querier interface {
	// Query runs sql with args and calls scan for each row.
	Query(ctx context.Context, sql string, args []any, scan func(Row) error) error
	// Exec runs a statement that takes no arguments.
	Exec(ctx context.Context, sql string) error
}

// DB is a Querier that can also run a function inside a transaction.
type DB interface {
	Querier
	InTx(ctx context.Context, fn func(Querier) error) error
}

// PgxQueryer is what pgxpool.Pool, pgx.Conn and pgx.Tx have in common.
type PgxQueryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Pgx adapts a pgx pool, connection or transaction. Statements run in the
// connection's own DefaultQueryExecMode: by default pgx prepares and caches
// them, which saves the server parsing and planning pglease's statements
// on every call (more than half the cost of an uncontended acquire). Behind
// PgBouncer in transaction pooling mode (before 1.21, or without
// max_prepared_statements) set default_query_exec_mode=exec in the DSN.
func Pgx(q PgxQueryer) DB { return pgxDB{q} }

type pgxDB struct{ q PgxQueryer }

func (d pgxDB) Query(ctx context.Context, sql string, args []any, scan func(Row) error) error {
	rows, err := d.q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return each(rows, scan)
}

func (d pgxDB) Exec(ctx context.Context, sql string) error {
	_, err := d.q.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	return err
}

func (d pgxDB) InTx(ctx context.Context, fn func(Querier) error) error {
	tx, err := d.q.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(pgxDB{tx}); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(ctx)
}

// SQLQueryer is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type SQLQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SQL adapts a database/sql handle. begin may be nil when the handle is
// already a transaction or a *sql.Conn (whose own BeginTx InTx uses).
func SQL(q SQLQueryer, begin func(context.Context) (*sql.Tx, error)) DB {
	return sqlDB{q, begin}
}

type sqlDB struct {
	q     SQLQueryer
	begin func(context.Context) (*sql.Tx, error)
}

func (d sqlDB) Query(ctx context.Context, query string, args []any, scan func(Row) error) error {
	rows, err := d.q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return each(rows, scan)
}

func (d sqlDB) Exec(ctx context.Context, query string) error {
	_, err := d.q.ExecContext(ctx, query)
	return err
}

func (d sqlDB) InTx(ctx context.Context, fn func(Querier) error) error {
	begin := d.begin
	if c, ok := d.q.(*sql.Conn); ok && begin == nil {
		begin = func(ctx context.Context) (*sql.Tx, error) { return c.BeginTx(ctx, nil) }
	}
	if begin == nil { // already a transaction
		return fn(d)
	}
	tx, err := begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(sqlDB{q: tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
