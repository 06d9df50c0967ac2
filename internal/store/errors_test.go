package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRetryableErrorsAreTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "53300"}, true},
		{&pgconn.PgError{Code: "25006"}, true},
		{&pgconn.PgError{Code: "42501"}, false},
		{&pgconn.PgError{Code: "23505"}, false},
		{fmt.Errorf("wrapped: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("wrapped: %w", pgconn.ErrConnClosed), true},
		// Error text is never matched: only the driver's own values.
		{errors.New("conn closed"), false},
		{errors.New("syntax"), false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestConnectionFailedOnlyForBrokenConnections(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "57P01"}, true},
		// Transient, but the connection works: not sent again elsewhere.
		{&pgconn.PgError{Code: "40001"}, false},
		{&pgconn.PgError{Code: "55P03"}, false},
		{fmt.Errorf("wrapped: %w", io.EOF), true},
		{fmt.Errorf("wrapped: %w", pgconn.ErrConnClosed), true},
		{errors.New("syntax"), false},
	} {
		if got := ConnectionFailed(tc.err); got != tc.want {
			t.Errorf("ConnectionFailed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// sqlStateErr is a driver error of another driver (lib/pq's shape).
type sqlStateErr string

func (e sqlStateErr) Error() string    { return "pq: " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

func TestClassifyReadsSQLStatesOfEveryDriver(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Kind
	}{
		{nil, KindOther},
		{errors.New("permission denied"), KindOther}, // text is never read
		{&pgconn.PgError{Code: "42501"}, KindPrivilege},
		{fmt.Errorf("op: %w", &pgconn.PgError{Code: "42P01"}), KindMissing},
		{&pgconn.PgError{Code: "3F000"}, KindMissing},
		{&pgconn.PgError{Code: "28P01"}, KindAuth},
		{&pgconn.PgError{Code: "3D000"}, KindNoDatabase},
		{&pgconn.PgError{Code: "53200"}, KindLockTableFull},
		{&pgconn.PgError{Code: "55P03"}, KindLockTimeout},
		{&pgconn.PgError{Code: "42883"}, KindMissingFunction},
		{&pgconn.PgError{Code: "57014"}, KindCanceled},
		{sqlStateErr("42501"), KindPrivilege},
		{sqlStateErr("23505"), KindOther},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if FromServer(io.EOF) || !FromServer(sqlStateErr("08006")) {
		t.Error("FromServer must report exactly the errors with a SQLSTATE")
	}
}
