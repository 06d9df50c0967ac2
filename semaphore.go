package pglease

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"
)

// slotName is the lease name of slot i of a semaphore.
func slotName(name string, i int) string { return name + "#" + strconv.Itoa(i) }

// trySlots makes one attempt on every slot, in random order so that
// contenders spread out, and returns the first acquired. When all are held
// it returns the holder of the slot that expires first.
func (c *Client) trySlots(ctx context.Context, name string, o leaseOptions) (*Lease, time.Duration, error) {
	var firstErr error
	soonest := time.Duration(-1)
	for _, i := range rand.Perm(o.slots) {
		l, res, err := c.tryName(ctx, slotName(name, i), o)
		if l != nil {
			return l, 0, nil
		}
		if !errors.Is(err, ErrNotAcquired) {
			return nil, 0, err
		}
		if firstErr == nil || (res.OtherRemaining >= 0 && (soonest < 0 || res.OtherRemaining < soonest)) {
			firstErr = err
			soonest = res.OtherRemaining
		}
	}
	return nil, soonest, firstErr
}

// waitSlots is Acquire for a semaphore: it tries every slot, then waits for
// a release of any of them, the first expiry, or the fallback poll.
func (c *Client) waitSlots(ctx context.Context, name string, o leaseOptions) (*Lease, error) {
	if _, err := c.session(); err != nil {
		return nil, err
	}
	b := newBackoff(50*time.Millisecond, 2*time.Second)
	var last error
	names := make([]string, o.slots)
	for i := range names {
		names[i] = slotName(name, i)
	}
	for {
		woken, unsubscribe := c.hub.subscribe(names...)
		l, soonest, err := c.trySlots(ctx, name, o)
		var delay time.Duration
		switch {
		case l != nil:
			unsubscribe()
			return l, nil
		case errors.Is(err, ErrNotAcquired):
			last = err
			b.reset()
			delay = c.expiryWait(soonest)
		case ctx.Err() != nil:
		case c.bg.Err() != nil:
			unsubscribe()
			return nil, ErrClosed
		case !IsRetryable(err):
			unsubscribe()
			return nil, err
		default:
			delay = b.next()
		}
		err = c.pause(ctx, woken, delay, last)
		unsubscribe()
		if err != nil {
			return nil, err
		}
	}
}
