package pglease

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pglease/pglease/internal/store"
)

var (
	// ErrNotAcquired means the lease is held by someone else. The error
	// returned is a *[HeldError] describing the holder.
	ErrNotAcquired = errors.New("pglease: lease is held by another owner")
	// ErrLeaseLost is the cause of a lease's end when it expired before a
	// renewal succeeded, or was taken over or force-released.
	ErrLeaseLost = errors.New("pglease: lease lost")
	// ErrSessionLost is the cause of a session-bound lease's end (see
	// [WithFastFailover]) when its database session ended. It also matches
	// [ErrLeaseLost]. A waiter may hold the lease within milliseconds of
	// the session's end, so whatever the lease protected must stop at once:
	// there is no safety margin to spend.
	ErrSessionLost = errors.New("pglease: lease lost with its database session")
	// ErrReleased is the cause of a lease's end after [Lease.Release].
	ErrReleased = errors.New("pglease: lease released")
	// ErrClosed is returned by calls on a closed [Client], and is the cause
	// of the end of every lease the client held when it was closed.
	ErrClosed = errors.New("pglease: client closed")
	// ErrInvalidName means a lease name is empty, longer than 255 bytes, not
	// valid UTF-8 or contains NUL.
	ErrInvalidName = errors.New("pglease: invalid lease name")
	// ErrInvalidOwner means an owner label is empty, longer than 255 bytes,
	// not valid UTF-8 or contains control characters.
	ErrInvalidOwner = errors.New("pglease: invalid owner")
	// ErrInvalidTTL means a TTL or other duration is out of range.
	ErrInvalidTTL = errors.New("pglease: invalid duration")
	// ErrInvalidIdentifier means a table, schema or channel name does not
	// match [a-z_][a-z0-9_]{0,62}.
	ErrInvalidIdentifier = errors.New("pglease: invalid identifier")
	// ErrNotHeld is returned by [Lease.Guard] when the lease is no longer
	// held with its token.
	ErrNotHeld = errors.New("pglease: lease is no longer held with this token")
	// ErrSessionUnavailable means a feature needs a dedicated database
	// session (fast failover, notifications) that this client cannot open.
	ErrSessionUnavailable = errors.New("pglease: a dedicated database session is not available")
	// ErrSchema means the lease table exists with a layout this version of
	// pglease cannot use. Nothing was changed.
	ErrSchema = errors.New("pglease: unusable lease table")
)

// HeldError is returned when a lease is held by another owner. It matches
// [ErrNotAcquired] with errors.Is.
type HeldError struct {
	// Holder is the current holder as seen by the server. Holder.Remaining is
	// how long until it expires unless renewed. When the row was being
	// changed concurrently Holder may be the zero value.
	Holder Info
}

// Error describes the holder.
func (e *HeldError) Error() string {
	if e.Holder.Owner == "" {
		return "pglease: lease is held by another owner"
	}
	return fmt.Sprintf("pglease: lease %q is held by %q (token %d, expires in %s)",
		e.Holder.Name, e.Holder.Owner, e.Holder.Token, e.Holder.Remaining.Round(time.Millisecond))
}

// Is reports whether target is ErrNotAcquired.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// IsRetryable reports whether err is transient (connection lost, server
// restarting or failing over, too many connections) so that the same call
// may succeed later.
func IsRetryable(err error) bool {
	return store.Retryable(err) || redo(err) || errors.Is(err, errRowBusy)
}

// lostError is the cause of a lost lease: it matches ErrLeaseLost (and
// ErrSessionLost when the database session of a session-bound lease ended)
// and says why.
type lostError struct {
	why     string
	session bool
}

func (e *lostError) Error() string { return "pglease: lease lost: " + e.why }
func (e *lostError) Is(target error) bool {
	return target == ErrLeaseLost || (e.session && target == ErrSessionLost)
}

// sessionEnded is the cause of a session-bound lease lost with its session.
func sessionEnded(why string) *lostError { return &lostError{why: why, session: true} }

// guardRefused reports whether err is the server's refusal of the Guard
// statement: the lease is not held with the token. The statement raises
// it by giving ErrNotHeld's text to set_config as an invalid value
// (invalid_parameter_value, 22023); the text is matched rather than the
// surrounding message, which the server may translate.
func guardRefused(err error) bool {
	return store.SQLState(err) == "22023" && strings.Contains(err.Error(), ErrNotHeld.Error())
}

// opError prefixes a database error with what pglease was doing.
func opError(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *store.SchemaError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: %s", ErrSchema, se.Msg)
	}
	hint := ""
	switch store.SQLState(err) {
	case "42501":
		hint = " (the role lacks a privilege: grant it, or create the table with `pglease migrate` as an owner role; see docs/OPERATIONS.md)"
	case "42P01", "3F000":
		hint = " (the lease table or its schema is missing: run `pglease migrate`)"
	case "28P01", "28000":
		hint = " (authentication failed: check the user and password)"
	case "3D000":
		hint = " (the database does not exist: check the DSN)"
	case "53200":
		hint = " (the server's lock table is full: each FastFailover lease holds an advisory lock; raise max_locks_per_transaction or use plain leases for large numbers of names)"
	}
	if hint == "" && IsRetryable(err) {
		hint = " (the database is unreachable or restarting; it will be retried where safe)"
	}
	return fmt.Errorf("pglease: %s: %w%s", op, err, hint)
}
