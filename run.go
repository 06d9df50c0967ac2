package pglease

import (
	"context"
	"errors"
)

// TryRun runs fn on exactly one instance: it makes one attempt to acquire
// name and, if that succeeds, calls fn with a context that ends when ctx
// ends or the lease is lost, then releases the lease. Like
// [Lease.Context], fn's context reports the loss (Err non-nil, cause
// matching [ErrLeaseLost]) as soon as the lease's local deadline has
// passed, even when checked by a goroutine resuming from a pause. When the
// lease is held elsewhere fn is not called and the error matches
// [ErrNotAcquired] (a
// *[HeldError]). Otherwise it returns fn's error, joined with the loss cause
// if the lease was lost while fn ran (fn may then have overlapped with the
// next holder; see [Lease.Guard]).
func (c *Client) TryRun(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	return runWith(ctx, "TryRun", c.TryAcquire, name, fn, opts)
}

// Run waits until name is acquired (or ctx ends, see [Client.Acquire]), then
// runs fn as [Client.TryRun] does.
func (c *Client) Run(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	return runWith(ctx, "Run", c.Acquire, name, fn, opts)
}

// runWith acquires name with acquire (Acquire or TryAcquire) and runs fn
// under the lease.
func runWith(ctx context.Context, call string, acquire func(context.Context, string, ...Option) (*Lease, error),
	name string, fn func(ctx context.Context) error, opts []Option) error {
	if fn == nil {
		return invalid(kindArgument, "%s: fn is nil", call)
	}
	l, err := acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return runUnder(ctx, l, fn)
}

func runUnder(ctx context.Context, l *Lease, fn func(ctx context.Context) error) (err error) {
	fctx, end := withLease(ctx, l)
	defer func() {
		end(nil)
		lost := causeOf(l.Context())
		if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if errors.Is(lost, ErrLeaseLost) || errors.Is(lost, ErrClosed) {
			err = errors.Join(err, errorf("%q ended while the function ran: %w", l.Name(), lost))
		}
	}()
	return fn(fctx)
}

// withLease returns a context that ends when ctx ends or when l ends (its
// cause then is the lease's), and a function that ends it with a cause and
// frees its resources. Like [Lease.Context], its Err checks the lease's
// local deadline itself.
func withLease(ctx context.Context, l *Lease) (context.Context, context.CancelCauseFunc) {
	inner, cancel := context.WithCancelCause(ctx)
	lctx := l.Context()
	stop := context.AfterFunc(lctx, func() { cancel(causeOf(lctx)) })
	return boundContext{inner, l, cancel}, func(cause error) {
		stop()
		cancel(cause)
	}
}

// boundContext is a context bound to a lease. The lease's end cancels it
// from another goroutine (the deadline timer, then an AfterFunc), which a
// goroutine resuming from a pause (GC, SIGSTOP) may run before; so Err
// asks the lease, which checks its deadline, and cancels the context at
// once when the lease has ended. Done, Value and Cause are the embedded
// context's.
type boundContext struct {
	context.Context
	l      *Lease
	cancel context.CancelCauseFunc
}

func (c boundContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if err := causeOf(c.l.Context()); err != nil {
		c.cancel(err) // idempotent: the first cause wins
	}
	return c.Context.Err()
}
