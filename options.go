package pglease

import (
	"encoding/json"
	"math"
	"time"
)

// Option changes how one lease is acquired; pass options to
// [Client.Acquire], [Client.TryAcquire], [Client.Run], [Client.TryRun],
// [Client.AcquireAll] and [Client.TryAcquireAll], and to an elector's terms
// as [ElectorConfig.LeaseOptions]. The zero Option changes nothing.
type Option struct{ apply func(*leaseOptions) error }

// leaseOptions is what the options of one acquisition resolve to.
type leaseOptions struct {
	ttl, minHold time.Duration
	maxHold      time.Duration // WithMaxHold; 0: no limit
	metadata     []byte        // JSON object
	session      bool          // WithFastFailover
	shared       bool          // WithShared
	slots        int
	quota        int // WithQuota: the capacity (0: not a quota) …
	weight       int // … and the units taken
	// used: the options given, as the columns of the call rules tell
	// them apart (see optionRules).
	used [numOptionIDs]bool
	// called: when the call began, for the wait time of EventAcquired.
	called time.Time
}

const (
	maxSlots         = 1000
	maxQuota         = math.MaxInt32
	maxMetadataBytes = 8192
)

// WithTTL sets the lease's time-to-live (at least 1s, a whole number of
// milliseconds) instead of [Config.TTL]. The client's SafetyMargin and
// RenewInterval must suit it as they must suit [Config.TTL]. An invalid
// TTL is reported as an *[InvalidError] of kind "TTL".
func WithTTL(ttl time.Duration) Option {
	return Option{func(o *leaseOptions) error {
		if err := checkTTL(ttl); err != nil {
			return err
		}
		o.ttl, o.used[optTTL] = ttl, true
		return nil
	}}
}

// WithMinHold keeps the lease held until d after acquisition even when it
// is released earlier (ShedLock's lockAtLeastFor), so that a job scheduled
// on several hosts with slightly different clocks runs once. d is a whole
// number of milliseconds, at most the lease's TTL; otherwise the error
// is an *[InvalidError].
func WithMinHold(d time.Duration) Option {
	return Option{func(o *leaseOptions) error {
		if d < 0 || d > maxTTL {
			return invalid(kindArgument, "minimum hold must be between 0 and 100 years, got %s", d)
		}
		if err := wholeMillis(kindArgument, "minimum hold", d); err != nil {
			return err
		}
		o.minHold, o.used[optMinHold] = d, true
		return nil
	}}
}

// WithMaxHold ends the lease d after it was acquired even though its
// renewals succeed (ShedLock's lockAtMostFor), so that a holder that is
// alive but stuck cannot keep the name forever. At that moment, measured
// on the holder's monotonic clock from when the acquisition was sent, the
// lease's context ends with a cause matching both [ErrHoldLimit] and
// [ErrLeaseLost], and its row is deleted (by token), so that a waiter takes
// the name at once; [Lease.Deadline] never lies past it. The holder's work
// must stop then, as on any loss: a stuck holder that does not is what
// fencing tokens are for. d is a whole number of milliseconds, at least
// 1s and at least the minimum hold ([WithMinHold]); otherwise the error is
// an *[InvalidError]. An [Elector] given it in
// [ElectorConfig.LeaseOptions] limits every term: a term that reaches it
// ends and the elector stays out of the election as after a step-down.
func WithMaxHold(d time.Duration) Option {
	return Option{func(o *leaseOptions) error {
		if d < minTTL || d > maxTTL {
			return invalid(kindArgument, "maximum hold must be between %s and 100 years, got %s", minTTL, d)
		}
		if err := wholeMillis(kindArgument, "maximum hold", d); err != nil {
			return err
		}
		o.maxHold, o.used[optMaxHold] = d, true
		return nil
	}}
}

// WithMetadata stores v, encoded as a JSON object of at most 8192 bytes,
// with the lease (host, pid and pglease version are always recorded).
// Several WithMetadata options merge; a value that does not encode as JSON
// is reported as an *[InvalidError].
func WithMetadata(v map[string]any) Option {
	return Option{func(o *leaseOptions) error {
		m := map[string]any{}
		if len(o.metadata) > 0 {
			if err := json.Unmarshal(o.metadata, &m); err != nil {
				return invalid(kindArgument, "metadata: %w", err)
			}
		}
		for k, x := range v {
			m[k] = x
		}
		b, err := json.Marshal(m)
		if err != nil {
			return invalid(kindArgument, "metadata must encode as JSON: %w", err)
		}
		if len(b) > maxMetadataBytes {
			return invalid(kindArgument, "metadata is %d bytes encoded, the maximum is %d", len(b), maxMetadataBytes)
		}
		o.metadata, o.used[optMetadata] = b, true
		return nil
	}}
}

// WithFastFailover ties the lease to the client's database session so
// that a waiter takes it over within milliseconds when the holder process
// dies; see "Fast failover" in the package documentation. It needs a
// connection of the client's own to PostgreSQL ([ErrSessionUnavailable]
// otherwise).
func WithFastFailover() Option {
	return Option{func(o *leaseOptions) error { o.session, o.used[optFastFailover] = true, true; return nil }}
}

// WithSlots makes the name a counting semaphore: up to n holders at once
// (Consul's lock -n). Each holder gets one of the slot names "NAME#0" …
// "NAME#n-1" ([Lease.Name] says which, [Config.Plan] lists them), each a
// lease of its own with its own fencing token. n is 1 to 1000 (1 is a
// plain lease on NAME itself, not a semaphore); otherwise the error
// is an *[InvalidError].
//
// n is recorded in every slot row, and every client of a semaphore must
// use the same n: while any slot is live (held, or kept for its minimum
// hold), an acquisition with another n fails at once with a *[KindError]
// rather than let more than the smaller n hold. A name is one kind of
// lease: a plain lease on NAME (n = 1, or a set's) and slots of NAME
// refuse each other the same way. Once every lease of NAME has been
// released or has expired, the next acquisition may use another kind.
// [Client.NewElector] refuses WithSlots: an election has one leader.
func WithSlots(n int) Option {
	return Option{func(o *leaseOptions) error {
		if n < 1 || n > maxSlots {
			return invalid(kindArgument, "slots must be between 1 and %d, got %d", maxSlots, n)
		}
		o.slots, o.used[optSlots] = n, n > 1
		return nil
	}}
}

// WithShared makes the lease a shared (read) lease of the name: any
// number of shared holders at once, never beside an exclusive holder (a
// lease of the name without the option), as with sync.RWMutex or
// etcd's RWMutex recipe. Each shared holder holds a row of its own,
// "NAME#i" ([Lease.Name] says which; the lowest i not held), with its own
// fencing token, renewed, released and guarded ([Lease.Guard]) as any
// lease is; [Info.Kind] reports the kind ("shared").
//
// Exclusive waiters are not starved: once an exclusive [Client.Acquire]
// of the name waits in the queue, new shared acquisitions wait behind it
// (a [Client.TryAcquire] is refused with a *[HeldError] whose Queued field
// says so), the shared holders drain, and the exclusive waiter takes the
// name; shared waiters queued before it go first (an exclusive waiter of
// a client without a session, which cannot queue, holds them back all the
// same: see "Shared leases" in the package documentation). Fast failover, a minimum
// and maximum hold apply to either kind. A semaphore ([WithSlots]) and
// shared leases of one name refuse each other with a *[KindError], as two
// slot counts do. WithShared cannot be combined with WithSlots, nor used
// by [Client.AcquireAll] or an [Elector] (an *[InvalidError]).
func WithShared() Option {
	return Option{func(o *leaseOptions) error { o.shared, o.used[optShared] = true, true; return nil }}
}

// WithQuota makes the lease w units of a quota of n: the name has a
// capacity of n units, and its holders, each taking the units it asks
// for, hold at most n between them (a weighted semaphore across the
// fleet, as golang.org/x/sync/semaphore is within a process: "this report
// uses 3 of the 10 connections the reporting replica allows"). Each
// holder holds a row of its own, "NAME#i" ([Lease.Name] says which; i is
// not a unit count), with its own fencing token, renewed, released and
// guarded as any lease is; fast failover and a minimum and maximum hold
// apply as to any lease.
//
// Waiters are served first in line first: while a client waits for the
// name, a later acquisition (of any weight) waits behind it, and a
// [Client.TryAcquire] is refused with a *[HeldError] whose Queued field
// says so, so that small requests cannot starve a large one. n and w are
// 1 to 2147483647 with w at most n; otherwise the error is an
// *[InvalidError]. Every client of a quota must use the same n: while any
// of its holders is live, an acquisition with another n, or another kind
// of lease of the name, fails at once with a *[KindError]. WithQuota
// cannot be combined with [WithSlots] or [WithShared], nor used by
// [Client.AcquireAll] or an [Elector].
func WithQuota(n, w int) Option {
	return Option{func(o *leaseOptions) error {
		if n < 1 || n > maxQuota {
			return invalid(kindArgument, "a quota must have 1 to %d units, got %d", maxQuota, n)
		}
		if w < 1 || w > n {
			return invalid(kindArgument, "a weight must be 1 to the quota's %d units, got %d", n, w)
		}
		o.quota, o.weight, o.used[optQuota] = n, w, true
		return nil
	}}
}

// leaseOptions resolves the options of a call of e (see resolveOptions).
func (c *Client) leaseOptions(e entry, opts []Option) (leaseOptions, error) {
	return resolveOptions(&c.cfg, c.meta, e, opts)
}

// resolveOptions applies opts to the defaults of cfg (already validated)
// and checks the result: the options' timing here, then that they ask for
// one kind of lease and that the call e takes them (checkOptions).
func resolveOptions(cfg *Config, meta []byte, e entry, opts []Option) (leaseOptions, error) {
	o := leaseOptions{ttl: cfg.TTL, metadata: meta, called: time.Now()}
	for _, opt := range opts {
		if opt.apply == nil {
			continue
		}
		if err := opt.apply(&o); err != nil {
			return o, err
		}
	}
	if o.minHold > o.ttl {
		// A release before the minimum hold keeps the row until then; a
		// longer hold than TTL would need renewals nobody sends.
		return o, invalid(kindArgument, "minimum hold %s exceeds the TTL %s", o.minHold, o.ttl)
	}
	if o.maxHold > 0 && o.minHold > o.maxHold {
		return o, invalid(kindArgument, "minimum hold %s exceeds the maximum hold %s", o.minHold, o.maxHold)
	}
	if err := cfg.checkTiming(o.ttl); err != nil {
		return o, err
	}
	return o, checkOptions(e, &o)
}
