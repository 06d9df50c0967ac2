package pglease

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pglease/pglease/internal/store"
)

// Config configures a [Client]. The zero value is valid: every field has a
// documented default.
type Config struct {
	// Table is the lease table, "table" or "schema.table"; each part must
	// match [a-z_][a-z0-9_]{0,62}. Default "pglease_leases" in the first
	// schema of the search_path.
	Table string
	// Owner labels the leases of this client in the table and in
	// pg_stat_activity (e.g. a Kubernetes pod name). It is a label only:
	// two clients with the same Owner still exclude each other. Default
	// "hostname-pid-random", unique per client. 1–255 bytes of UTF-8
	// without control characters (see [CheckOwner]).
	Owner string
	// TTL is the default time-to-live of a lease; [WithTTL] overrides it
	// per lease. Default 30s; minimum 1s; a whole number of milliseconds
	// (the server counts it in milliseconds).
	TTL time.Duration
	// SafetyMargin is subtracted from the TTL to get the local deadline of a
	// lease (see the package documentation). It bounds the process pause the
	// mutual exclusion guarantee tolerates. Default TTL/5 of each lease;
	// must be below TTL/2 and a whole number of milliseconds.
	SafetyMargin time.Duration
	// RenewInterval is how often held leases are renewed. Default a third
	// of the shortest TTL held; must leave at least two renewal attempts
	// before the local deadline (TTL minus SafetyMargin), defaults
	// included: a SafetyMargin of TTL/3 or more with the default interval
	// is refused. A whole number of milliseconds.
	RenewInterval time.Duration
	// PollInterval bounds how long a blocked [Client.Acquire] waits between
	// checks when no notification arrives (lost notifications, PgBouncer).
	// Default 5s.
	PollInterval time.Duration
	// StatementTimeout bounds each statement pglease runs outside a lease's
	// safety deadline. Default 10s.
	StatementTimeout time.Duration
	// ConnectTimeout bounds each connection attempt of a client created
	// with [Open]. Default 10s, or connect_timeout from the DSN.
	ConnectTimeout time.Duration
	// MaxConns is the pool size of a client created with [Open]. Default 4.
	MaxConns int32
	// DisableNotify turns off LISTEN/NOTIFY; waiters then poll every
	// PollInterval and on lease expiry. Use it when the client cannot have
	// a session of its own (PgBouncer in transaction pooling mode).
	DisableNotify bool
	// DisableAutoMigrate stops the client from creating its table when it
	// is missing; use it when the table is created by a migration tool
	// (see [Client.DDL]).
	DisableAutoMigrate bool
	// AlertAfter makes a contender report [EventAlert] (and log a warning)
	// when the holder it finds has not renewed for longer than this, while
	// its lease is still unexpired: the holder may be stuck. It only
	// reports; the lease becomes reclaimable when its TTL passes without a
	// heartbeat (the "stale threshold" is the TTL). Default 0: off.
	AlertAfter time.Duration
	// Logger receives structured logs. Default: none.
	Logger *slog.Logger
	// Observer receives lease events. Default: none.
	Observer Observer
}

const (
	defaultTTL         = 30 * time.Second
	minTTL             = time.Second
	maxTTL             = 100 * 365 * 24 * time.Hour
	defaultPoll        = 5 * time.Second
	defaultStmtTimeout = 10 * time.Second
	defaultConnTimeout = 10 * time.Second
	defaultMaxConns    = 4
	maxNameBytes       = 255
	maxOwnerBytes      = 255
	releaseTimeout     = 5 * time.Second
)

// withDefaults validates cfg and fills in defaults.
func (cfg Config) withDefaults() (Config, *store.Store, error) {
	st, err := store.New(cfg.Table)
	if err != nil {
		return cfg, nil, fmt.Errorf("%w: %s", ErrInvalidIdentifier, err)
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	if err := CheckOwner(cfg.Owner); err != nil {
		return cfg, nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = defaultTTL
	}
	if err := checkTTL(cfg.TTL); err != nil {
		return cfg, nil, err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"PollInterval", &cfg.PollInterval, defaultPoll},
		{"StatementTimeout", &cfg.StatementTimeout, defaultStmtTimeout},
		{"ConnectTimeout", &cfg.ConnectTimeout, 0},
	} {
		if *d.v < 0 {
			return cfg, nil, fmt.Errorf("%w: %s must not be negative, got %s", ErrInvalidTTL, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.SafetyMargin < 0 || cfg.RenewInterval < 0 {
		return cfg, nil, fmt.Errorf("%w: SafetyMargin and RenewInterval must not be negative", ErrInvalidTTL)
	}
	if err := wholeMillis("SafetyMargin", cfg.SafetyMargin); err != nil {
		return cfg, nil, err
	}
	if err := wholeMillis("RenewInterval", cfg.RenewInterval); err != nil {
		return cfg, nil, err
	}
	// The default TTL must be usable with the margin and interval: a
	// client whose every default lease would be refused is refused here,
	// before it connects.
	if err := cfg.checkTiming(cfg.TTL); err != nil {
		return cfg, nil, err
	}
	if cfg.MaxConns < 0 {
		return cfg, nil, fmt.Errorf("pglease: MaxConns must not be negative, got %d", cfg.MaxConns)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = defaultMaxConns
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, st, nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < minTTL {
		return fmt.Errorf("%w: TTL must be at least 1s, got %s", ErrInvalidTTL, ttl)
	}
	if ttl > maxTTL {
		return fmt.Errorf("%w: TTL must be at most 100 years, got %s", ErrInvalidTTL, ttl)
	}
	return wholeMillis("TTL", ttl)
}

// wholeMillis refuses a duration finer than a millisecond. The server is
// sent lease times in whole milliseconds, so a finer value would be
// rounded there but not in the client's own deadline arithmetic, and the
// two would disagree about when the lease ends.
func wholeMillis(what string, d time.Duration) error {
	if d%time.Millisecond != 0 {
		return fmt.Errorf("%w: %s %s is not a whole number of milliseconds: the server counts lease times in milliseconds and would round it differently from the client; round it to a millisecond (e.g. %s)",
			ErrInvalidTTL, what, d, d.Truncate(time.Millisecond))
	}
	return nil
}

// checkTiming refuses a TTL that the configured (or default) safety margin
// and renewal interval cannot keep safely: the margin must be below half
// the TTL, and at least two renewal attempts must start before the local
// deadline (TTL minus the margin), so that one failed or slow renewal does
// not lose the lease.
func (cfg *Config) checkTiming(ttl time.Duration) error {
	margin, renew := marginFor(cfg, ttl), renewFor(cfg, ttl)
	what := func(name string, set bool, d time.Duration, def string) string {
		if set {
			return fmt.Sprintf("%s %s", name, d)
		}
		return fmt.Sprintf("%s %s (the default, %s)", name, d, def)
	}
	ms := what("SafetyMargin", cfg.SafetyMargin > 0, margin, "TTL/5")
	ri := what("RenewInterval", cfg.RenewInterval > 0, renew, "TTL/3")
	// Compared without multiplying first: 2*d could overflow.
	if margin >= ttl || margin >= ttl-margin {
		return fmt.Errorf("%w: %s must be below half the TTL %s: raise the TTL or lower SafetyMargin",
			ErrInvalidTTL, ms, ttl)
	}
	if deadline := ttl - margin; renew >= deadline || renew >= deadline-renew {
		return fmt.Errorf("%w: %s leaves fewer than two renewal attempts before the local deadline of a %s TTL (TTL minus %s = %s), so one failed renewal would lose the lease: lower RenewInterval or SafetyMargin, or raise the TTL",
			ErrInvalidTTL, ri, ttl, ms, deadline)
	}
	return nil
}

// CheckName returns an error matching [ErrInvalidName] unless name is 1–255
// bytes of valid UTF-8 without NUL.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: name is empty", ErrInvalidName)
	case len(name) > maxNameBytes:
		return fmt.Errorf("%w: name is %d bytes, the maximum is %d", ErrInvalidName, len(name), maxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name is not valid UTF-8", ErrInvalidName)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return fmt.Errorf("%w: name contains a NUL byte", ErrInvalidName)
		}
	}
	return nil
}

// CheckOwner returns an error matching [ErrInvalidOwner] unless owner is
// 1–255 bytes of valid UTF-8 without control characters ([Config.Owner]
// is shown in the lease table, logs and pg_stat_activity).
func CheckOwner(owner string) error {
	switch {
	case owner == "":
		return fmt.Errorf("%w: owner is empty", ErrInvalidOwner)
	case len(owner) > maxOwnerBytes:
		return fmt.Errorf("%w: owner is %d bytes, the maximum is %d", ErrInvalidOwner, len(owner), maxOwnerBytes)
	case !utf8.ValidString(owner):
		return fmt.Errorf("%w: owner is not valid UTF-8", ErrInvalidOwner)
	}
	for _, r := range owner {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: owner contains the control character %U", ErrInvalidOwner, r)
		}
	}
	return nil
}

// randomID identifies one Client among all processes.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Option changes how one lease is acquired. The zero Option changes
// nothing.
type Option struct{ apply func(*leaseOptions) error }

type leaseOptions struct {
	ttl, minHold time.Duration
	metadata     []byte
	session      bool
	slots        int
}

// WithTTL sets the lease's time-to-live (at least 1s, a whole number of
// milliseconds) instead of [Config.TTL]. The client's SafetyMargin and
// RenewInterval must suit it as they must suit [Config.TTL].
func WithTTL(ttl time.Duration) Option {
	return Option{func(o *leaseOptions) error {
		if err := checkTTL(ttl); err != nil {
			return err
		}
		o.ttl = ttl
		return nil
	}}
}

// WithMinHold keeps the lease held until d after acquisition even when it
// is released earlier (ShedLock's lockAtLeastFor), so that a job scheduled on
// several hosts with slightly different clocks runs once. d is a whole
// number of milliseconds, at most the lease's TTL.
func WithMinHold(d time.Duration) Option {
	return Option{func(o *leaseOptions) error {
		if d < 0 || d > maxTTL {
			return fmt.Errorf("%w: minimum hold must be between 0 and 100 years, got %s", ErrInvalidTTL, d)
		}
		if err := wholeMillis("minimum hold", d); err != nil {
			return err
		}
		o.minHold = d
		return nil
	}}
}

// WithMetadata stores v, encoded as a JSON object, with the lease (host,
// pid and pglease version are always recorded).
func WithMetadata(v map[string]any) Option {
	return Option{func(o *leaseOptions) error {
		m := map[string]any{}
		if err := json.Unmarshal(o.metadata, &m); err != nil {
			return fmt.Errorf("pglease: metadata: %w", err)
		}
		for k, x := range v {
			m[k] = x
		}
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("pglease: metadata must encode as JSON: %w", err)
		}
		if len(b) > 8192 {
			return fmt.Errorf("pglease: metadata is %d bytes encoded, the maximum is 8192", len(b))
		}
		o.metadata = b
		return nil
	}}
}

// FastFailover ties the lease to the client's database session so that a
// waiter takes it over within milliseconds when the holder process dies; see
// "Fast failover" in the package documentation.
func WithFastFailover() Option {
	return Option{func(o *leaseOptions) error { o.session = true; return nil }}
}

// WithSlots makes the name a counting semaphore: up to n holders at once
// (Consul's lock -n). Each holder gets one of the slot names "NAME#0" …
// "NAME#n-1" ([Lease.Name] says which), each a lease of its own with its own
// fencing token. n is 1 to 1000; 1 is a plain lease.
func WithSlots(n int) Option {
	return Option{func(o *leaseOptions) error {
		if n < 1 || n > maxSlots {
			return fmt.Errorf("pglease: slots must be between 1 and %d, got %d", maxSlots, n)
		}
		o.slots = n
		return nil
	}}
}

const maxSlots = 1000

// Version is the version of this package, recorded in lease metadata.
const Version = "0.1.0"

func (c *Client) leaseOptions(opts []Option) (leaseOptions, error) {
	return resolveOptions(&c.cfg, c.meta, opts)
}

// resolveOptions applies opts to the defaults of cfg (already validated)
// and checks the result.
func resolveOptions(cfg *Config, meta []byte, opts []Option) (leaseOptions, error) {
	o := leaseOptions{ttl: cfg.TTL, metadata: meta}
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
		return o, fmt.Errorf("%w: minimum hold %s exceeds the TTL %s", ErrInvalidTTL, o.minHold, o.ttl)
	}
	if err := cfg.checkTiming(o.ttl); err != nil {
		return o, err
	}
	return o, nil
}

// Validate returns the error [Open] would return for cfg and, with opts,
// the error an acquisition with those options would return, without
// connecting. Tools check their input with it before anything connects.
func (cfg Config) Validate(opts ...Option) error {
	full, _, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	_, err = resolveOptions(&full, nil, opts)
	return err
}

// Schedule is the local timing of a lease (see the package documentation).
type Schedule struct {
	// TTL is the lease's time-to-live on the server.
	TTL time.Duration
	// RenewInterval: a renewal is sent this long after the previous
	// successful one (or the acquisition) was sent.
	RenewInterval time.Duration
	// SafetyMargin: the local deadline ([Lease.Deadline]) is TTL minus
	// SafetyMargin after the send time of the last successful renewal.
	SafetyMargin time.Duration
}

// Deadline is how long after the send time of the last successful renewal
// the holder must have stopped: TTL minus SafetyMargin.
func (s Schedule) Deadline() time.Duration { return s.TTL - s.SafetyMargin }

// Schedule returns the timing cfg gives a lease acquired with opts (its
// TTL from [WithTTL], else the TTL of cfg or its default), or the error
// [Config.Validate] would return.
func (cfg Config) Schedule(opts ...Option) (Schedule, error) {
	full, _, err := cfg.withDefaults()
	if err != nil {
		return Schedule{}, err
	}
	o, err := resolveOptions(&full, nil, opts)
	if err != nil {
		return Schedule{}, err
	}
	return Schedule{TTL: o.ttl, RenewInterval: renewFor(&full, o.ttl), SafetyMargin: marginFor(&full, o.ttl)}, nil
}

// defaultMetadata is recorded with every lease of a client.
func defaultMetadata() []byte {
	host, _ := os.Hostname()
	meta, _ := json.Marshal(map[string]any{"host": host, "pid": os.Getpid(), "version": Version})
	return meta
}

// margin is the safety margin of a lease with the given TTL.
func (c *Client) margin(ttl time.Duration) time.Duration { return marginFor(&c.cfg, ttl) }

// renewEvery is the renewal interval for a lease with the given TTL.
func (c *Client) renewEvery(ttl time.Duration) time.Duration { return renewFor(&c.cfg, ttl) }

func marginFor(cfg *Config, ttl time.Duration) time.Duration {
	if cfg.SafetyMargin > 0 {
		return cfg.SafetyMargin
	}
	return ttl / 5
}

func renewFor(cfg *Config, ttl time.Duration) time.Duration {
	if cfg.RenewInterval > 0 {
		return cfg.RenewInterval
	}
	return ttl / 3
}
