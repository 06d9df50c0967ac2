package pgleasecron

import (
	"errors"
	"fmt"

	"github.com/pglease/pglease"
)

// InvalidError is the error of a value the scheduler refuses before it
// connects or changes anything: a schedule ([Parse], [Every]), a job name
// ([CheckJobName], or one registered twice), a job's function or options
// ([Scheduler.Add]), a [Config] field of its own ([New]) or a history
// limit. The fields of the embedded pglease.Config are refused by pglease,
// with a *pglease.InvalidError (a lease table name's is of kind
// "identifier").
type InvalidError struct {
	// Job is the job whose value it is, or "" (a Config field, or a
	// schedule or job name checked on its own).
	Job string
	// Reason says what is wrong and what to do, without the
	// "pgleasecron: " prefix and the job ("invalid schedule \"61 * * * *\":
	// ..."), for tools that show it in their own words (the pglease
	// command names the crontab's file and line).
	Reason string

	cause error // the error that made the value invalid, or nil
}

// Error is the reason, with the job when there is one.
func (e *InvalidError) Error() string {
	if e.Job == "" {
		return "pgleasecron: " + e.Reason
	}
	return fmt.Sprintf("pgleasecron: job %q: %s", e.Job, e.Reason)
}

// Unwrap returns the error that made the value invalid (a pglease error
// for the job's lease options), or nil.
func (e *InvalidError) Unwrap() error { return e.cause }

// invalid returns an *InvalidError whose reason is format and args as
// fmt.Errorf formats them; what they wrap (%w) is its cause.
func invalid(format string, args ...any) *InvalidError {
	err := fmt.Errorf(format, args...)
	e := &InvalidError{Reason: err.Error()}
	if u, ok := err.(interface{ Unwrap() error }); ok {
		e.cause = u.Unwrap()
	}
	return e
}

// refused is the error of a value pglease refused: what it was, then
// pglease's reason (an *pglease.InvalidError's), with the pglease error as
// the cause.
func refused(what string, err error) *InvalidError {
	why := err.Error()
	var ie *pglease.InvalidError
	if errors.As(err, &ie) {
		why = ie.Reason
	}
	return &InvalidError{Reason: what + ": " + why, cause: err}
}

// forJob returns err as the error of job: a copy of an *InvalidError with
// its Job set, or err itself.
func forJob(job string, err error) error {
	if ie, ok := err.(*InvalidError); ok {
		c := *ie
		c.Job = job
		return &c
	}
	return err
}

// scheduleSyntax is what a schedule looks like, for the errors of one that
// cannot be read.
const scheduleSyntax = "a schedule is 5 cron fields (minute hour day-of-month month day-of-week), 6 with seconds first, a descriptor (@hourly, @daily...) or @every DURATION"
