package pglease

import (
	"context"
	"errors"
	"fmt"
)

// TryRun runs fn on exactly one instance: it makes one attempt to acquire
// name and, if that succeeds, calls fn with a context that ends when ctx
// ends or the lease is lost, then releases the lease. When the lease is held
// elsewhere fn is not called and the error matches [ErrNotAcquired] (a
// *[HeldError]). Otherwise it returns fn's error, joined with the loss cause
// if the lease was lost while fn ran (fn may then have overlapped with the
// next holder; see [Lease.Guard]).
func (c *Client) TryRun(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	l, err := c.TryAcquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return runUnder(ctx, l, fn)
}

// Run waits until name is acquired (or ctx ends, see [Client.Acquire]), then
// runs fn as [Client.TryRun] does.
func (c *Client) Run(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return runUnder(ctx, l, fn)
}

func runUnder(ctx context.Context, l *Lease, fn func(ctx context.Context) error) (err error) {
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(l.Err()) })
	defer func() {
		stop()
		cancel(nil)
		lost := l.Err()
		if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if errors.Is(lost, ErrLeaseLost) || errors.Is(lost, ErrClosed) {
			err = errors.Join(err, fmt.Errorf("pglease: %q ended while the function ran: %w", l.name, lost))
		}
	}()
	return fn(fctx)
}
