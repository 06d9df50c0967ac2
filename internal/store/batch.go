package store

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Batcher sends several statements in one round trip: a pgx connection.
// Batching needs pgx; the database/sql adapter has no equivalent.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// AcquireBatch runs the acquisitions in one round trip: the statements
// Acquire runs (acquireStmt), sent together and ended by one Sync, so that
// they form one implicit transaction with one commit (one WAL flush). When
// perStatement is positive, each acquisition statement is bounded by it on
// the server (statement_timeout for this transaction only), so that the
// batch ends, in an error, within len(as) × perStatement.
//
// rs holds the statements' results only when err is nil. Otherwise nothing
// of the batch committed: the first statement that failed (a lock timeout,
// a cancellation) aborted the transaction, and results read before it
// describe rows that were rolled back.
func (s *Store) AcquireBatch(ctx context.Context, conn Batcher, as []AcquireArgs, perStatement time.Duration) (rs []AcquireResult, err error) {
	inBatch := make([]AcquireArgs, len(as))
	for i, a := range as {
		a.inBatch = true
		inBatch[i] = a
	}
	as = inBatch
	type stmt struct {
		scan   func(Row) error
		result func() AcquireResult
	}
	b := &pgx.Batch{}
	if perStatement > 0 {
		b.Queue(s.Q.BatchStatementTimeout, strconv.FormatInt(max(perStatement.Milliseconds(), 1), 10))
	}
	stmts := make([]stmt, len(as))
	for i, a := range as {
		sql, args, scan, result, err := s.acquireStmt(a)
		if err != nil {
			return nil, err // nothing sent
		}
		b.Queue(sql, args...)
		stmts[i] = stmt{scan, result}
	}
	br := conn.SendBatch(ctx, b)
	read := func(scan func(Row) error) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		return each(rows, scan)
	}
	if perStatement > 0 {
		err = read(func(Row) error { return nil })
	}
	rs = make([]AcquireResult, len(as))
	for i := 0; err == nil && i < len(as); i++ {
		if err = read(stmts[i].scan); err != nil {
			break
		}
		rs[i] = stmts[i].result()
	}
	// Close reads up to the Sync: the commit, or the error that aborted
	// the transaction.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return rs, nil
}

// await runs a watcher's blocking statement, bounded by wait alone (see
// WatchBounds in session.sql): one batch, one round trip, on a connection
// whose own statement_timeout and lock_timeout may be shorter (the
// dedicated session's).
func (s *Store) await(ctx context.Context, conn Batcher, wait time.Duration, sql string, args ...any) error {
	return s.awaitRow(ctx, conn, wait, nil, sql, args...)
}

// awaitRow is await for a statement that returns one row, which scan
// reads (nil: none is read).
func (s *Store) awaitRow(ctx context.Context, conn Batcher, wait time.Duration, scan func(Row) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(s.Q.WatchBounds, strconv.FormatInt(max(wait.Milliseconds(), 1), 10))
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		if scan != nil {
			err = scan(br.QueryRow())
		} else {
			_, err = br.Exec()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}
