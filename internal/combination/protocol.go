package combination

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease"
)

// The driver (the test) and its agents (each a client in a process of its
// own) talk in JSON lines: a [Command] per line on the agent's stdin, a
// [Reply] per line on its stdout, each written with one write(2), so that
// a SIGKILL loses at most the line being written.

// Command kinds.
const (
	CmdOpen     = "open"     // pglease.Open
	CmdMigrate  = "migrate"  // admin.Migrate: create the table if missing
	CmdAcquire  = "acquire"  // Client.Acquire, bounded by Timeout
	CmdTry      = "try"      // Client.TryAcquire
	CmdAll      = "all"      // Client.AcquireAll, bounded by Timeout
	CmdTryAll   = "tryall"   // Client.TryAcquireAll
	CmdRelease  = "release"  // Release of a lease or set
	CmdGuard    = "guard"    // a fenced write: Lease.Guard, then the register, in one transaction
	CmdStepDown = "stepdown" // Client.RequestStepDown
)

// Command is one call the driver asks an agent to make.
type Command struct {
	ID     int      `json:"id"`
	Op     string   `json:"op"`
	Names  []string `json:"names,omitempty"` // acquisitions: the names; step-down: the row
	Slots  int      `json:"slots,omitempty"`
	Fast   bool     `json:"fast,omitempty"`
	Shared bool     `json:"shared,omitempty"`
	// Quota and Weight: WithQuota(Quota, Weight) when Quota > 0 (an agent
	// of the previous release ignores them; the driver sends it none).
	Quota   int           `json:"quota,omitempty"`
	Weight  int           `json:"weight,omitempty"`
	MaxHold time.Duration `json:"max_hold,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	// Handle names a lease (or set) the agent holds or held: given by an
	// acquisition, used by release and guard.
	Handle int    `json:"handle,omitempty"`
	Row    string `json:"row,omitempty"` // guard: which lease of the handle
	Value  int64  `json:"value,omitempty"`
}

// Reply kinds.
const (
	ReplyReturn    = "ret"       // a command returned (Cmd)
	ReplyDone      = "done"      // a lease's Done fired (Handle, Name, Token, Dl, Cause)
	ReplyStepDown  = "stepdown"  // a lease heard a step-down request; the agent releases it
	ReplyReleased  = "released"  // that release returned (Call, T, Err)
	ReplyContended = "contended" // an attempt of the agent found Name held (an observer event)
	ReplyClosed    = "closed"    // the agent, shutting down, closed its client (Call: when Close was called, T, Err)
)

// Reply is one line from an agent. T is when it happened (wall clock, Unix
// nanoseconds; every process on the machine shares that clock).
type Reply struct {
	K      string    `json:"k"`
	Cmd    int       `json:"cmd,omitempty"`
	Handle int       `json:"h,omitempty"`
	Call   int64     `json:"call,omitempty"` // when the agent made the call
	T      int64     `json:"t"`
	Leases []Granted `json:"leases,omitempty"`
	Err    *ErrInfo  `json:"err,omitempty"`
	Name   string    `json:"n,omitempty"`
	Token  int64     `json:"tok,omitempty"`
	Dl     int64     `json:"dl,omitempty"` // done: the lease's local deadline then
	Cause  *ErrInfo  `json:"cause,omitempty"`
}

// Granted is one lease an acquisition returned.
type Granted struct {
	Row     string `json:"row"`
	Token   int64  `json:"tok"`
	Session bool   `json:"sess,omitempty"`
	Dl      int64  `json:"dl"`
}

// ErrInfo describes an error: its text, the sentinels it matches, whether
// pglease calls it retryable, and the SQLSTATE of a server error.
type ErrInfo struct {
	Msg       string   `json:"msg"`
	Is        []string `json:"is,omitempty"`
	Retryable bool     `json:"retry,omitempty"`
	Code      string   `json:"code,omitempty"`
}

// Matches reports whether the error matched the sentinel named s.
func (e *ErrInfo) Matches(s string) bool {
	if e == nil {
		return false
	}
	for _, x := range e.Is {
		if x == s {
			return true
		}
	}
	return false
}

// sentinels are the errors an ErrInfo is matched against, by name.
var sentinels = []struct {
	name string
	err  error
}{
	{"NotAcquired", pglease.ErrNotAcquired},
	{"LeaseLost", pglease.ErrLeaseLost},
	{"SessionLost", pglease.ErrSessionLost},
	{"HoldLimit", pglease.ErrHoldLimit},
	{"Released", pglease.ErrReleased},
	{"Closed", pglease.ErrClosed},
	{"NoLease", pglease.ErrNoLease},
	{"NotHeld", pglease.ErrNotHeld},
	{"SessionUnavailable", pglease.ErrSessionUnavailable},
	{"Schema", pglease.ErrSchema},
	{"DeadlineExceeded", context.DeadlineExceeded},
	{"Canceled", context.Canceled},
}

// describe turns err into an ErrInfo (nil for nil).
func describe(err error) *ErrInfo {
	if err == nil {
		return nil
	}
	e := &ErrInfo{Msg: err.Error(), Retryable: pglease.IsRetryable(err)}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			e.Is = append(e.Is, s.name)
		}
	}
	// The error types, by the same names. A *KindError keeps the label
	// "SlotsMismatch", which the agents of earlier releases send (the
	// upgrade runs mix them with this one's).
	if errors.As(err, new(*pglease.KindError)) {
		e.Is = append(e.Is, "SlotsMismatch")
	}
	if errors.As(err, new(*pglease.InvalidError)) {
		e.Is = append(e.Is, "Invalid")
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		e.Code = pe.Code
	}
	return e
}
