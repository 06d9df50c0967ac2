package pglease

import (
	"context"
	"errors"
	"slices"
)

// maxSetNames bounds the names of one [LeaseSet]: each is a row written,
// and an advisory lock held, by one transaction.
const maxSetNames = 64

// TryAcquireAll makes one attempt to acquire every one of names (1 to 64
// distinct names) together, all or nothing, and returns at once. When any
// of them is held elsewhere (or by another goroutine of this client)
// nothing is acquired, and the error is a *[HeldError] matching
// [ErrNotAcquired] that names the first such name and its holder (the
// message lists the others). [WithTTL], [WithMinHold], [WithMaxHold] and
// [WithMetadata] apply to every lease of the set; [WithSlots],
// [WithShared] and [WithFastFailover] do not apply and are refused with an
// *[InvalidError], as are an empty set, duplicate names and more than 64
// names. ctx bounds this call only, never the leases.
func (c *Client) TryAcquireAll(ctx context.Context, names []string, opts ...Option) (*LeaseSet, error) {
	sorted, o, err := c.beginAll(ctx, names, opts)
	if err != nil {
		return nil, err
	}
	s, err := c.acquireSet(ctx, sorted, o, false)
	return s, c.closedErr(err)
}

// AcquireAll blocks until every one of names is acquired together, all or
// nothing, or ctx ends; it takes the same names and options as
// [Client.TryAcquireAll]. Clients asking for overlapping sets in any order
// never deadlock: a set is taken in one transaction that locks its names in
// one canonical order, and a set that cannot be taken whole holds nothing
// while it waits. Waiting is driven by the table's release notifications
// for any of the names (not those within another client's burst: see
// "Waiting" in the package documentation), by a timer at the moment the
// holders' leases would expire, and by the fallback poll. A set does not
// queue for its names: a name
// promised to a client queued for it alone (see "Waiting" in the package
// documentation) goes to that client first. When ctx ends first the error
// matches both [ErrNotAcquired] and ctx.Err(), and nothing of the attempt
// is left behind. ctx bounds this call only, never the leases.
func (c *Client) AcquireAll(ctx context.Context, names []string, opts ...Option) (*LeaseSet, error) {
	sorted, o, err := c.beginAll(ctx, names, opts)
	if err != nil {
		return nil, err
	}
	s, err := c.acquireSet(ctx, sorted, o, true)
	if errors.Is(err, ErrNotAcquired) && ctx.Err() != nil {
		return nil, err // gave up: keep the holder and ctx.Err()
	}
	return s, c.closedErr(err)
}

// beginAll validates a call and returns the names sorted: the canonical
// order in which their locks, local and on the server, are taken.
func (c *Client) beginAll(ctx context.Context, names []string, opts []Option) ([]string, leaseOptions, error) {
	switch {
	case len(names) == 0:
		return nil, leaseOptions{}, invalid(kindArgument, "a set of leases needs at least one name")
	case len(names) > maxSetNames:
		return nil, leaseOptions{}, invalid(kindArgument, "a set of leases has at most %d names, got %d", maxSetNames, len(names))
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i, name := range sorted {
		if err := checkName(name); err != nil {
			return nil, leaseOptions{}, err
		}
		if i > 0 && sorted[i-1] == name {
			return nil, leaseOptions{}, invalid(kindArgument, "name %q appears more than once in the set", name)
		}
	}
	o, err := c.leaseOptions(entrySet, opts)
	if err != nil {
		return nil, o, err
	}
	if err := c.prepare(ctx); err != nil {
		return nil, o, c.closedErr(err)
	}
	return sorted, o, nil
}

// acquireSet runs the acquisition engine for a set (names sorted), once
// (TryAcquireAll) or until ctx ends (AcquireAll).
func (c *Client) acquireSet(ctx context.Context, names []string, o leaseOptions, wait bool) (*LeaseSet, error) {
	leases, err := c.runAcquisition(ctx, func() *acquisition {
		return &acquisition{c: c, names: names, kind: kindOf(entrySet, &o), o: o, wait: wait}
	})
	if err != nil {
		return nil, err
	}
	return newLeaseSet(c, leases), nil
}
