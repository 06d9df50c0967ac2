package pglease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// Every error pglease returns says "pglease: " once, at its start, and
// matches one of these sentinels with errors.Is, is one of the error types
// below (*[InvalidError], *[KindError]; errors.As finds them), or wraps a
// driver error. A condition that always carries data is its type alone; a
// sentinel names a condition, with or without a type beside it
// (*[HeldError] describes the holder of an [ErrNotAcquired] when it was
// seen).
var (
	// ErrNotAcquired means the lease is held by someone else. The error
	// returned is a *[HeldError] describing the holder.
	ErrNotAcquired = errors.New("pglease: lease is held by another owner")
	// ErrLeaseLost is the cause of a lease's end when it expired before a
	// renewal succeeded, or was taken over or force-released.
	ErrLeaseLost = errors.New("pglease: lease lost")
	// ErrSessionLost is the cause of a fast-failover lease's end
	// ([WithFastFailover]) when the database session it is bound to
	// ended. It also matches [ErrLeaseLost]. A waiter may hold the lease within
	// milliseconds of the session's end, so whatever the lease protected
	// must stop at once: there is no safety margin to spend.
	ErrSessionLost = errors.New("pglease: lease lost with its database session")
	// ErrHoldLimit is the cause of a lease's end when it reached the
	// maximum hold it was acquired with ([WithMaxHold]) while still held.
	// It also matches [ErrLeaseLost]: the lease ended without its holder
	// asking, and a waiter may hold the name at once.
	ErrHoldLimit = errors.New("pglease: hold limit reached")
	// ErrReleased is the cause of a lease's end after [Lease.Release].
	ErrReleased = errors.New("pglease: lease released")
	// ErrClosed is returned by calls on a closed [Client], and is the cause
	// of the end of every lease the client held when it was closed.
	ErrClosed = errors.New("pglease: client closed")
	// ErrNoLease is returned by [Client.Get] and admin.ForceRelease
	// when the table has no row for the name, by [Client.RequestStepDown]
	// when nothing holds it.
	ErrNoLease = errors.New("pglease: no such lease")
	// ErrNotHeld is returned by [Lease.Guard] when the lease is no longer
	// held with its token.
	ErrNotHeld = errors.New("pglease: lease is no longer held with this token")
	// ErrStepDown is the cause of an [Elector] term that ended because
	// some client asked its leader to step down ([Client.RequestStepDown]).
	ErrStepDown = errors.New("pglease: asked to step down")
	// ErrSessionUnavailable means fast failover ([WithFastFailover],
	// [Lease.SessionFile]) needs a database session of the client's own
	// that it cannot have here: a database/sql driver other than pgx, a
	// pooling proxy, or a lease without fast failover or already ended.
	ErrSessionUnavailable = errors.New("pglease: a dedicated database session is not available")
	// ErrSchema means the lease table exists with a layout this version of
	// pglease cannot use, or, named without a schema, has no schema to be
	// created in (no schema of the search_path exists). Nothing was
	// changed.
	ErrSchema = errors.New("pglease: unusable lease table")
	// ErrNoTable is returned by admin.ForceRelease,
	// [Client.RequestStepDown] and admin.Cleanup when the lease table
	// (or its schema) does not exist: they act on rows that are there and
	// never create the table, so a mistyped table name is reported rather
	// than created. Nothing was changed. It is also returned by the calls
	// of a client with [Config.DisableAutoMigrate] that need the table
	// when it does not exist: never created, or gone since the client
	// used it (dropped, or lost in a failover or a restore), until it is
	// created ('pglease migrate', admin.Migrate).
	ErrNoTable = errors.New("pglease: no lease table")
)

// InvalidError is the error of a value pglease refuses before it sends or
// changes anything: a lease name, an owner, a TTL, a table or schema name,
// a [Config] field (or a SafetyMargin or RenewInterval that does not suit
// the TTL), an [Option]'s value (slots, metadata, minimum hold), or a nil
// pool, handle or function ([Config.Validate] and [Config.Plan] check
// without connecting). Find it with errors.As; it also matches the error
// that made the value invalid, if any.
type InvalidError struct {
	// Kind is what was refused, as the message names it: "lease name"
	// (see [Config.Plan] for what a name may be), "owner" (1–255 bytes of
	// UTF-8 without control characters), "TTL" (1s to 100 years, a whole
	// number of milliseconds), "identifier" (a table or schema name, which
	// must match [a-z_][a-z0-9_]{0,62}) or "argument" (any other value).
	Kind string
	// Reason says what is wrong and what to do, without the "pglease: "
	// prefix and the kind ("TTL must be at least 1s, got 0s"), for tools
	// that name the value in their own words (the pglease command says
	// "invalid --ttl 0s: " and the reason).
	Reason string

	cause error // the error that made the value invalid, or nil
}

// The kinds of [InvalidError].
const (
	kindName       = "lease name"
	kindOwner      = "owner"
	kindTTL        = "TTL"
	kindIdentifier = "identifier"
	kindArgument   = "argument"
)

// Error is the kind and the reason.
func (e *InvalidError) Error() string { return "pglease: invalid " + e.Kind + ": " + e.Reason }

// Unwrap returns the error that made the value invalid, or nil.
func (e *InvalidError) Unwrap() error { return e.cause }

// invalid returns an *InvalidError of kind whose reason is format and args
// as fmt.Errorf formats them; what they wrap (%w) is its cause.
func invalid(kind string, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	e := &InvalidError{Kind: kind, Reason: strings.ReplaceAll(err.Error(), "pglease: ", "")}
	if strings.Contains(format, "%w") {
		e.cause = err
	}
	return e
}

// HeldError is returned when a lease is held by another owner. It matches
// [ErrNotAcquired] with errors.Is.
type HeldError struct {
	// Holder is the current holder as seen by the server. Holder.Remaining is
	// how long until it expires unless renewed. When the row was being
	// changed concurrently Holder may be the zero value.
	Holder Info
	// Queued is the number of live waiters of other clients queued ahead
	// of a blocked Acquire (see "Waiting" in the package documentation);
	// while there are any, the lease, even a free one, is theirs first.
	Queued int
}

// Error describes the holder.
func (e *HeldError) Error() string {
	if e.Holder.Owner == "" && e.Queued > 0 {
		return fmt.Sprintf("pglease: lease %q is promised to %d waiting client(s) queued ahead", e.Holder.Name, e.Queued)
	}
	if e.Holder.Owner == "" {
		return ErrNotAcquired.Error()
	}
	msg := fmt.Sprintf("pglease: lease %q is held by %q (token %d, expires in %s)",
		e.Holder.Name, e.Holder.Owner, e.Holder.Token, e.Holder.Remaining.Round(time.Millisecond))
	if e.Queued > 0 {
		msg += fmt.Sprintf(", with %d waiting client(s) queued ahead", e.Queued)
	}
	return msg
}

// Is reports whether target is ErrNotAcquired.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// KindError is returned when a name is asked for as another kind of lease
// than the one its live leases hold (held, or kept for a minimum hold).
// The kinds of a name's live leases must go together, whichever clients
// hold them: plain (exclusive) leases and shared leases ([WithShared]) do,
// as a writer and its readers do; a semaphore ([WithSlots]) goes with
// neither, nor with a semaphore of another slot count, which would let
// more holders in than the smaller count allows. Nothing was acquired,
// and waiting does not help while those leases are held: the clients of
// the name disagree, which is a misconfiguration, not contention. The kind
// can change once every lease of the name has been released (or has
// expired).
type KindError struct {
	// Name is the name asked for (a semaphore's, without a slot suffix).
	Name string
	// Want is the kind this acquisition asked for, Have the kind of the
	// name's live leases, each one of:
	//
	//	"plain lease"           neither WithSlots(n > 1) nor WithShared; a set's leases
	//	"shared lease"          WithShared
	//	"semaphore of N slots"  WithSlots(N), N > 1
	//
	// A kind with a size is written "<kind> of <size> <unit>", and a kind
	// added later is named the same way. They are words rather than codes or
	// counts because a program has nothing to compute from them: the caller
	// knows what it asked for, and the fix is to make every client of the
	// name ask for the same kind, not to adopt the one found (which would
	// hide the disagreement); what to show is the message.
	Want, Have string
}

// Error says what went wrong and what to do.
func (e *KindError) Error() string {
	return fmt.Sprintf("pglease: %q is held as a %s, and this client asked for a %s: use the same kind of lease (WithSlots, WithShared, WithQuota) on every client of a name, or wait until its leases are released",
		e.Name, e.Have, e.Want)
}

// IsRetryable reports whether err is transient (connection lost, server
// restarting or failing over, too many connections) so that the same call
// may succeed later.
func IsRetryable(err error) bool {
	return store.Retryable(err) || redo(err) || errors.Is(err, errRowBusy) || errors.Is(err, errSlow)
}

// lostError is the cause of a lost lease: it matches ErrLeaseLost (and
// ErrSessionLost when the database session of a session-bound lease ended,
// ErrHoldLimit when the lease reached its maximum hold) and says why.
type lostError struct {
	why     string
	session bool
	hold    bool
}

func (e *lostError) Error() string { return "pglease: lease lost: " + e.why }
func (e *lostError) Is(target error) bool {
	return target == ErrLeaseLost || (e.session && target == ErrSessionLost) || (e.hold && target == ErrHoldLimit)
}

// sessionEnded is the cause of a session-bound lease lost with its session.
func sessionEnded(why string) *lostError { return &lostError{why: why, session: true} }

// The internal errors below never reach a caller on their own: an
// acquisition retries after the first three (see redo), errProxied is
// wrapped in ErrSessionUnavailable, errRowBusy and errSlow are retryable
// (errSlow reaches a caller wrapped, as the cause of a failed attempt), and the last
// two are causes of contexts.
var (
	// errLate: an acquisition succeeded, but its reply came after the
	// lease's safety deadline, so it was released at once.
	errLate = errors.New("the reply came after the lease's safety deadline; the lease was released (retry)")
	// errSlow: a statement outlived the client's bound of it
	// (Config.StatementTimeout), the caller's context still alive; it is
	// retryable, as the server's statement_timeout is.
	errSlow = errors.New("the statement outlived its bound (Config.StatementTimeout): the server is slow or unreachable")
	// errOrphan: the attempt found, and released, a row this client wrote
	// in an acquisition whose reply was lost.
	errOrphan = errors.New("released a row of this client whose acquisition reply was lost (retry)")
	// errSessionGone: a session-bound acquisition committed, but the
	// session ended before the lease was registered, so a waiter may
	// already hold it.
	errSessionGone = errors.New("the database session ended right after the acquisition; the lease was given up (retry)")
	// errProxied: WithFastFailover was asked for on a connection that
	// reaches the server through a pooling proxy, whose server backend
	// other clients use too.
	errProxied = errorf("%w: WithFastFailover needs a database session of its own, and this client's connection reaches a server backend shared with other clients (a transaction- or statement-pooling proxy such as PgBouncer answered for it); connect fast-failover clients to PostgreSQL directly (or through a plain TCP proxy), or use plain leases", ErrSessionUnavailable)
	// errRowBusy: a renewal skipped a lease whose row a guarded
	// transaction holds locked; it is still held and is renewed again
	// shortly.
	errRowBusy = errors.New("pglease: a lease row is locked by a guarded transaction; its renewal is retried shortly")
	// errOverdue is the cause of an operation's context when the
	// operation outlives its bound on the dedicated connection.
	errOverdue = errors.New("pglease: statement on the dedicated connection overdue")
	// errResigned is the cause of a term's end after Elector.Resign.
	errResigned = errors.New("pglease: resigned leadership")
)

// redo reports an attempt that acquired or found a row of this client's
// and undid it: trying again at once is expected to succeed.
func redo(err error) bool {
	return errors.Is(err, errLate) || errors.Is(err, errOrphan) || errors.Is(err, errSessionGone)
}

// gaveUp is the error of an acquisition whose context ended: it matches
// the last holder seen (or ErrNotAcquired) and ctx.Err().
func gaveUp(ctx context.Context, last error) error {
	if last == nil {
		last = ErrNotAcquired
	}
	return errorf("%w (gave up waiting: %w)", last, ctx.Err())
}

// errorf is fmt.Errorf for pglease's own errors: the message starts with
// "pglease: " and says it once, however many pglease errors it wraps;
// errors.Is and errors.As see every wrapped error.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &message{text: "pglease: " + strings.ReplaceAll(err.Error(), "pglease: ", ""), err: err}
}

type message struct {
	text string
	err  error
}

func (m *message) Error() string { return m.text }
func (m *message) Unwrap() error { return m.err }

// opError prefixes a database error with what pglease was doing, and adds
// what to do about it where the error says.
func opError(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *store.SchemaError
	if errors.As(err, &se) {
		return errorf("%w: %s", ErrSchema, se.Msg)
	}
	hint := ""
	switch store.Classify(err) {
	case store.KindPrivilege:
		hint = privilegeHint(err)
	case store.KindMissing:
		hint = " (the lease table or its schema does not exist: it was never created, or was dropped, or lost in a failover or a restore; create it with admin.Migrate, which a client does before its first acquisition, and again before the next one once it found the table lost, unless Config.DisableAutoMigrate is set)"
	case store.KindAuth:
		hint = " (authentication failed: check the user and password)"
	case store.KindNoDatabase:
		hint = " (the database does not exist: check the DSN)"
	case store.KindLockTableFull:
		hint = " (the server's lock table is full: raise max_locks_per_transaction, or look for transactions that hold many locks)"
	default:
		if IsRetryable(err) {
			hint = " (the database is unreachable or restarting; it will be retried where safe)"
		}
	}
	return errorf("%s: %w%s", op, err, hint)
}

// privilegeHint says which privilege on which object the role lacks, as
// the server names the object, and what to grant: docs/OPERATIONS.md
// lists the grants.
func privilegeHint(err error) string {
	kind, name := store.DeniedObject(err)
	var what string
	switch kind {
	case "schema":
		what = "the role lacks a privilege on the schema " + name + ", USAGE to use its objects or CREATE to create them" +
			": grant USAGE to the role, and have a role that may create objects there create the lease table (admin.Migrate; the CLI's 'pglease migrate')"
	case "database":
		what = "the role lacks the privilege to create a schema in the database " + name +
			" (CREATE on it): have a role that may create the lease table (admin.Migrate; the CLI's 'pglease migrate'), or create the schema first"
	case "table", "relation", "view":
		what = "the role lacks a privilege on the table " + name +
			": grant it SELECT, INSERT, UPDATE and DELETE there (SELECT alone to only read)"
	case "sequence":
		what = "the role lacks a privilege on the token sequence " + name + ": grant it USAGE on the sequence"
	case "function", "procedure":
		what = "the role lacks the privilege to execute the function " + name + ": grant it EXECUTE (PostgreSQL grants it to PUBLIC unless default privileges revoke it)"
	default:
		what = "the role lacks a privilege the statement needs: grant it, or have a role that owns the lease table's objects run it"
	}
	return " (" + what + "; see docs/OPERATIONS.md, Privileges)"
}

// newStore returns the store of a table spec, or an *InvalidError of
// kind "identifier".
func newStore(table string) (*store.Store, error) {
	st, err := store.New(table)
	if err != nil {
		return nil, invalid(kindIdentifier, "%s", err)
	}
	return st, nil
}
