package store

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"regexp"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// This file is the one place that reads driver errors: SQLSTATE codes
// and the connection errors of pgx, database/sql and the network. The
// rest of pglease asks the questions below and never looks at codes or
// error text.

// ErrNotHeld is the cause of a Guard statement the server refused: the
// lease is not held with the token (or the caller said it had ended).
var ErrNotHeld = errors.New("the lease is not held with this token")

// Kind is what a server error means to pglease.
type Kind int

// The kinds of error [Classify] tells apart.
const (
	KindOther         Kind = iota
	KindPrivilege          // the role lacks a privilege (42501)
	KindMissing            // the table or its schema does not exist (42P01, 3F000)
	KindAuth               // authentication failed (28P01, 28000)
	KindNoDatabase         // the database does not exist (3D000)
	KindLockTableFull      // the server's lock table is full (53200)
	KindLockTimeout        // a lock wait outlived lock_timeout (55P03)
	// KindMissingFunction: a function does not exist (42883), such as one
	// of the table's, dropped alone or with its schema (a statement that
	// found the schema just before a DROP SCHEMA committed reports the
	// function missing, not the schema).
	KindMissingFunction
	// KindCanceled: the statement was cancelled (57014): by a cancel
	// request, or by statement_timeout.
	KindCanceled
)

// Classify returns the kind of err; KindOther for anything not listed,
// including errors that did not come from the server.
func Classify(err error) Kind {
	switch sqlState(err) {
	case "42501":
		return KindPrivilege
	case "42P01", "3F000":
		return KindMissing
	case "28P01", "28000":
		return KindAuth
	case "3D000":
		return KindNoDatabase
	case "53200":
		return KindLockTableFull
	case "55P03":
		return KindLockTimeout
	case "42883":
		return KindMissingFunction
	case "57014":
		return KindCanceled
	}
	return KindOther
}

// FromServer reports whether err is an error the server sent (it has a
// SQLSTATE), as opposed to one of the network or the driver.
func FromServer(err error) bool { return sqlState(err) != "" }

// sqlState returns the SQLSTATE code of a server error, or "".
// deniedFor reads the object of the server's "permission denied for
// KIND NAME" (the message of SQLSTATE 42501 in English, the language the
// server speaks to clients unless lc_messages says otherwise).
var deniedFor = regexp.MustCompile(`^permission denied for (schema|table|sequence|function|procedure|database|relation|view) (.+)$`)

// DeniedObject returns the kind ("schema", "table", "sequence",
// "function", "database"...) and the name of the object a privilege
// error names, or "", "" when err is none or names none (a message in
// another language, or "permission denied to create ...").
func DeniedObject(err error) (kind, name string) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		return "", ""
	}
	m := deniedFor.FindStringSubmatch(pe.Message)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

func sqlState(err error) string {
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
	switch code := sqlState(err); {
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
	return connectionError(err)
}

// connectionError reports an error of the network or the driver that
// means the connection failed or could not be made.
func connectionError(err error) bool {
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
		errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed)
}

// ConnectionFailed reports whether err means that the statement's
// connection failed or that the server ended it (a restart, a terminated
// backend, a failover), rather than that the statement failed on a working
// connection: the same statement may be sent again on another connection.
func ConnectionFailed(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch code := sqlState(err); {
	case code == "":
		return connectionError(err)
	case code[:2] == "08", code == "57P01", code == "57P02", code == "57P03":
		return true
	}
	return false
}
