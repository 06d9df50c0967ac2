// Package pgleaseriver gives River (github.com/riverqueue/river) jobs
// fleet-wide limits through pglease leases: a job kind (or each key taken
// from its jobs' args) runs one job at a time across every River client on
// the database, or at most N at a time. A job that finds its limit reached
// is snoozed, not failed, and River hands it out again a little later.
//
// Install a [Middleware] in every client's Config.Middleware:
//
//	mw, err := pgleaseriver.New(leases,
//		pgleaseriver.Limit{Kind: "sync_account", Key: pgleaseriver.ArgsKey("account_id")}, // one job per account
//		pgleaseriver.Limit{Kind: "export", Slots: 3})                                        // three exports at a time
//	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
//		Middleware: []rivertype.Middleware{mw}, ...})
//
// The running job's lease is in its context ([LeaseOf]): its Token is a
// fencing token for what the job writes, and the context ends if the lease
// is lost.
//
// # Failure model
//
//   - A client killed mid-job: its lease frees at its TTL, or at once with
//     pglease.WithFastFailover, and the next job of the kind (or key) runs.
//     River's rescuer works the killed job again after the client's
//     RescueStuckJobsAfter, like any job of a dead client.
//   - A lease lost while the job runs (its client was cut off from the
//     database for longer than the TTL): the job's context ends with a
//     cause wrapping pglease.ErrLeaseLost, and another client may start a
//     job of the limit meanwhile. Work returns an error wrapping
//     pglease.ErrLeaseLost whatever the job returned, so that River
//     retries it: nil becomes that error, a job's error is joined to it,
//     and a snooze (river.JobSnooze) or a cancel (river.JobCancel), which
//     River would honour instead of retrying, is kept in its text only.
//   - The database refuses the lease (it is unreachable): the job fails with
//     that error, and River retries it by its retry policy.
package pgleaseriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/pglease/pglease"
)

// LeasePrefix starts the lease name of a limit: "river:" and the job kind,
// then ":" and the key for a keyed limit, as pglease.FitName makes it
// (see [LeaseName]): any kind and key River accepts work, "order#12" and
// keys of any length among them.
const LeasePrefix = "river:"

// LeaseName is the lease name of a limit of kind, for a keyed limit's key
// (""; a keyed limit's key "" is the kind's own name), of slots slots
// (0 or 1: a mutex): for pglease ls, admin.ForceRelease and the like.
// The name is LeasePrefix, kind, ":" and key as they are when that makes
// a valid lease name with room for the slots' "#i", else one
// pglease.FitName fits for them.
func LeaseName(kind, key string, keyed bool, slots int) string {
	s := kind
	if keyed {
		s += ":" + key
	}
	max := 0
	if slots > 1 {
		max = 255 - len("#"+strconv.Itoa(slots-1))
	}
	return pglease.FitName(LeasePrefix, s, max)
}

// DefaultSnooze is how long a job that finds its limit reached waits
// before River hands it out again, unless the Limit says otherwise.
const DefaultSnooze = time.Second

// SnoozeNow is a Limit's Snooze that makes a job that finds its limit
// reached available again at once (river.JobSnooze(0)): any negative
// Snooze does, as 0 means DefaultSnooze.
const SnoozeNow time.Duration = -1

// Limit is a fleet-wide limit on the jobs of one kind.
type Limit struct {
	// Kind is the job kind (JobArgs.Kind) the limit applies to.
	Kind string
	// Key, when set, takes a key from each job (see ArgsKey): the limit
	// then applies to the jobs of each key apart. Without it, every job of
	// the kind shares one limit.
	Key func(job *rivertype.JobRow) (string, error)
	// Slots is how many jobs of the limit run at once across the fleet:
	// 0 or 1 is a mutex, more a semaphore (pglease.WithSlots).
	Slots int
	// Snooze is how long a job that finds the limit reached waits before
	// River hands it out again: DefaultSnooze when 0; at once, as
	// river.JobSnooze(0), when negative ([SnoozeNow]).
	Snooze time.Duration
	// LeaseOptions are the lease's (pglease.WithTTL,
	// pglease.WithFastFailover).
	LeaseOptions []pglease.Option
}

// Middleware is a River worker middleware that runs the jobs of its
// limits under pglease leases; jobs of other kinds run as they would
// without it.
type Middleware struct {
	river.MiddlewareDefaults
	c      *pglease.Client
	limits map[string]Limit
}

var _ rivertype.WorkerMiddleware = (*Middleware)(nil)

// New returns a Middleware of limits, whose leases live in c's table. A
// limit without a kind, a kind given twice or a negative Slots is refused.
func New(c *pglease.Client, limits ...Limit) (*Middleware, error) {
	m := &Middleware{c: c, limits: make(map[string]Limit, len(limits))}
	for _, l := range limits {
		switch _, dup := m.limits[l.Kind]; {
		case l.Kind == "":
			return nil, errors.New("pgleaseriver: a Limit without a Kind: name the job kind (JobArgs.Kind) it limits")
		case dup:
			return nil, fmt.Errorf("pgleaseriver: two limits for the job kind %q: give one Limit per kind", l.Kind)
		case l.Slots < 0:
			return nil, fmt.Errorf("pgleaseriver: the limit of %q has Slots %d: give 1 (a mutex, the default) or more", l.Kind, l.Slots)
		}
		m.limits[l.Kind] = l
	}
	return m, nil
}

type leaseKey struct{}

// LeaseOf returns the lease a job of a limit runs under, from the context
// River gave the job's worker.
func LeaseOf(ctx context.Context) (*pglease.Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*pglease.Lease)
	return l, ok
}

// Work runs the job under its limit's lease, or snoozes it when the limit
// is reached (River's WorkerMiddleware).
func (m *Middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	l, ok := m.limits[job.Kind]
	if !ok {
		return doInner(ctx)
	}
	var key string
	if l.Key != nil {
		var err error
		if key, err = l.Key(job); err != nil {
			return fmt.Errorf("pgleaseriver: the key of job %d (%s): %w", job.ID, job.Kind, err)
		}
	}
	name := LeaseName(job.Kind, key, l.Key != nil, l.Slots)
	opts := l.LeaseOptions
	if l.Slots > 1 {
		opts = append(opts[:len(opts):len(opts)], pglease.WithSlots(l.Slots))
	}
	lease, err := m.c.TryAcquire(ctx, name, opts...)
	if held := (*pglease.HeldError)(nil); errors.As(err, &held) {
		return river.JobSnooze(snooze(l.Snooze))
	}
	if err != nil {
		return fmt.Errorf("pgleaseriver: job %d (%s): %w", job.ID, job.Kind, err)
	}
	defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()

	jctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, lease))
	stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	err = doInner(jctx)
	stop()
	cancel(nil)
	if lctx := lease.Context(); lctx.Err() != nil && errors.Is(context.Cause(lctx), pglease.ErrLeaseLost) {
		return lostError(name, job.ID, context.Cause(lctx), err)
	}
	return err
}

// snooze is the snooze of a Limit's Snooze d: see Limit.
func snooze(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d == 0:
		return DefaultSnooze
	}
	return d
}

// lostError is Work's error for a job whose lease was lost while it ran:
// it wraps cause (matching pglease.ErrLeaseLost) and what the job
// returned, so that River retries the job. A snooze or a cancel the job
// returned is kept as text only: River would honour it (errors.As) and not
// retry a job that may have run beside another of its limit.
func lostError(name string, id int64, cause, jobErr error) error {
	lost := fmt.Errorf("pgleaseriver: the lease %q was lost while job %d ran; another client may have run a job of its limit meanwhile, so River retries it: %w", name, id, cause)
	var (
		snooze *rivertype.JobSnoozeError
		cancel *rivertype.JobCancelError
	)
	switch {
	case jobErr == nil:
		return lost
	case errors.As(jobErr, &snooze), errors.As(jobErr, &cancel):
		return fmt.Errorf("%w (the job returned %q, which River would not retry)", lost, jobErr.Error())
	}
	return errors.Join(jobErr, lost)
}

// ArgsKey returns a Limit's Key that reads the top-level field of a job's
// JSON args (a string or a number): ArgsKey("account_id") limits the jobs
// of each account apart. A job whose args lack the field fails, with an
// error naming it.
func ArgsKey(field string) func(job *rivertype.JobRow) (string, error) {
	return func(job *rivertype.JobRow) (string, error) {
		var args map[string]json.RawMessage
		if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
			return "", fmt.Errorf("read the args: %w", err)
		}
		raw, ok := args[field]
		if !ok || string(raw) == "null" {
			return "", fmt.Errorf("the args have no %q field to take the key from", field)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s, nil
		}
		var n json.Number
		if err := json.Unmarshal(raw, &n); err == nil {
			return n.String(), nil
		}
		return "", fmt.Errorf("the args' %q field is neither a string nor a number: %s", field, raw)
	}
}
