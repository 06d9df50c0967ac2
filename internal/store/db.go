package store

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Row is one result row.
type Row interface{ Scan(dest ...any) error }

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
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
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
// already a transaction.
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
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (d sqlDB) Exec(ctx context.Context, query string) error {
	_, err := d.q.ExecContext(ctx, query)
	return err
}

func (d sqlDB) InTx(ctx context.Context, fn func(Querier) error) error {
	if d.begin == nil {
		return fn(d)
	}
	tx, err := d.begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(sqlDB{q: tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// SQLState returns the SQLSTATE code of a server error, or "".
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	var coded interface{ SQLState() string } // lib/pq and others
	if errors.As(err, &coded) {
		return coded.SQLState()
	}
	return ""
}

// Retryable reports whether err is transient: the connection failed or the
// server is restarting, shutting down, failing over or out of connections,
// so the same statement may succeed on a new attempt. Statements of pglease
// are idempotent for a given token, so retrying them is safe.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch code := SQLState(err); {
	case code == "":
	case len(code) == 5 && code[:2] == "08": // connection exception
		return true
	case code == "57P01", code == "57P02", code == "57P03": // admin/crash shutdown, cannot connect now
		return true
	case code == "53300", code == "40001", code == "40P01", code == "25006": // too many connections, serialization, deadlock, read-only (standby)
		return true
	case code == "57014", code == "55P03": // statement timeout or cancel, lock not available
		return true
	default:
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, net.ErrClosed) || isConnClosed(err)
}

// ConnectionFailed reports whether err means that the statement's
// connection failed or that the server ended it (a restart, a terminated
// backend, a failover), rather than that the statement failed on a working
// connection: the same statement may be sent again on another connection.
func ConnectionFailed(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch code := SQLState(err); {
	case code == "":
		return Retryable(err)
	case code[:2] == "08", code == "57P01", code == "57P02", code == "57P03":
		return true
	}
	return false
}

func isConnClosed(err error) bool {
	// pgx reports use of a closed connection with a plain error string.
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "conn closed" || e.Error() == "closed pool" {
			return true
		}
	}
	return false
}
