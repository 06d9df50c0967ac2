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
// documented default. [Open], [NewFromPool] and [NewFromDB] check every
// field before anything connects: an invalid field is reported as an
// *[InvalidError], of kind "identifier" for Table, "owner" for Owner,
// "TTL" for TTL, and "argument" for any other field (or a SafetyMargin or
// RenewInterval that does not suit the TTL).
type Config struct {
	// Table is the lease table, "table" or "schema.table"; each part must
	// match [a-z_][a-z0-9_]{0,62}. Default "pglease_leases" in the first
	// schema of the search_path.
	Table string
	// Owner labels the leases of this client in the table and in
	// pg_stat_activity (e.g. a Kubernetes pod name). It is a label only:
	// two clients with the same Owner still exclude each other. Default
	// "hostname-pid-random", unique per client. 1–255 bytes of UTF-8
	// without control characters.
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
	// Default 5s. A wait that watches its holder's doorbell checks every
	// 20 s instead, when PollInterval is shorter: the doorbell, the
	// holder's expiry and its session's end wake it, and the check comes
	// with its watch's periodic renewal (see "Waiting" above).
	PollInterval time.Duration
	// StatementTimeout bounds each statement pglease runs outside a lease's
	// safety deadline. Default 10s.
	StatementTimeout time.Duration
	// ConnectTimeout bounds each connection attempt of a client created
	// with [Open], per host: with a multi-host DSN each host is given this
	// long in turn. Default 10s, or connect_timeout from the DSN.
	ConnectTimeout time.Duration
	// MaxConns is the pool size of a client created with [Open]. Default 4.
	MaxConns int32
	// DisableNotify turns off LISTEN/NOTIFY; waiters then poll every
	// PollInterval and on lease expiry. Use it when the client cannot have
	// a session of its own (PgBouncer in transaction pooling mode).
	DisableNotify bool
	// DisableAutoMigrate stops the client from creating its table when it
	// is missing; use it when the table is created by a migration tool
	// (see package admin: its DDL and Migrate). Such a client that finds
	// its table gone after using it (dropped, or lost in a failover or a
	// restore) fails every call at once with [ErrNoTable] until the table
	// is created again; without it, the client's next acquisition creates
	// it anew.
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
	st, err := newStore(cfg.Table)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	if err := checkOwner(cfg.Owner); err != nil {
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
		{"AlertAfter", &cfg.AlertAfter, 0},
	} {
		if *d.v < 0 {
			return cfg, nil, invalid(kindArgument, "%s must not be negative, got %s", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"SafetyMargin", cfg.SafetyMargin}, {"RenewInterval", cfg.RenewInterval}} {
		if d.v < 0 {
			return cfg, nil, invalid(kindArgument, "%s must not be negative, got %s", d.name, d.v)
		}
		if err := wholeMillis(kindArgument, d.name, d.v); err != nil {
			return cfg, nil, err
		}
	}
	// The default TTL must be usable with the margin and interval: a
	// client whose every default lease would be refused is refused here,
	// before it connects.
	if err := cfg.checkTiming(cfg.TTL); err != nil {
		return cfg, nil, err
	}
	if cfg.MaxConns < 0 {
		return cfg, nil, invalid(kindArgument, "MaxConns must not be negative, got %d", cfg.MaxConns)
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
		return invalid(kindTTL, "TTL must be at least 1s, got %s", ttl)
	}
	if ttl > maxTTL {
		return invalid(kindTTL, "TTL must be at most 100 years, got %s", ttl)
	}
	return wholeMillis(kindTTL, "TTL", ttl)
}

// wholeMillis refuses a duration finer than a millisecond. The server is
// sent lease times in whole milliseconds, so a finer value would be
// rounded there but not in the client's own deadline arithmetic, and the
// two would disagree about when the lease ends. The error is of kind.
func wholeMillis(kind string, what string, d time.Duration) error {
	if d%time.Millisecond != 0 {
		return invalid(kind, "%s %s is not a whole number of milliseconds: the server counts lease times in milliseconds and would round it differently from the client; round it to a millisecond (e.g. %s)",
			what, d, d.Truncate(time.Millisecond))
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
		return invalid(kindArgument, "%s must be below half the TTL %s: raise the TTL or lower SafetyMargin", ms, ttl)
	}
	if deadline := ttl - margin; renew >= deadline || renew >= deadline-renew {
		return invalid(kindArgument, "%s leaves fewer than two renewal attempts before the local deadline of a %s TTL (TTL minus %s = %s), so one failed renewal would lose the lease: lower RenewInterval or SafetyMargin, or raise the TTL",
			ri, ttl, ms, deadline)
	}
	return nil
}

// checkName returns an *InvalidError of kind "lease name" unless name may
// be acquired (see [Config.Plan]): a row name (checkRowName) not of the
// form of a slot name.
func checkName(name string) error {
	if err := checkRowName(name); err != nil {
		return err
	}
	if i, ok := slotSuffix(name); ok {
		return invalid(kindName, "%q ends in %q, which is reserved for slot names (%q is slot %s of the semaphore %q): use another name, such as %q",
			name, name[i:], name, name[i+1:], name[:i], name[:i]+"-"+name[i+1:])
	}
	return nil
}

// checkRowName returns an *InvalidError of kind "lease name" unless name may
// name a row of the lease table: 1–255 bytes of valid UTF-8 without NUL
// (slot names included).
func checkRowName(name string) error {
	return checkLabel(kindName, "name", name, maxNameBytes, func(r rune) string {
		if r == 0 {
			return "a NUL byte"
		}
		return ""
	})
}

// slotSuffix reports whether name has the form of a slot name, a
// nonempty name followed by '#' and ASCII digits, and where the '#' is.
func slotSuffix(name string) (int, bool) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) || i < 2 || name[i-1] != '#' {
		return 0, false
	}
	return i - 1, true
}

// checkOwner returns an *InvalidError of kind "owner" unless owner is
// 1–255 bytes of valid UTF-8 without control characters ([Config.Owner]
// is shown in the lease table, logs and pg_stat_activity).
func checkOwner(owner string) error {
	return checkLabel(kindOwner, "owner", owner, maxOwnerBytes, func(r rune) string {
		if unicode.IsControl(r) {
			return fmt.Sprintf("the control character %U", r)
		}
		return ""
	})
}

// checkLabel checks that s is 1 to max bytes of valid UTF-8 without a rune
// that refuse describes; the error is of kind and calls s what.
func checkLabel(kind string, what, s string, max int, refuse func(rune) string) error {
	switch {
	case s == "":
		return invalid(kind, "%s is empty", what)
	case len(s) > max:
		return invalid(kind, "%s is %d bytes, the maximum is %d", what, len(s), max)
	case !utf8.ValidString(s):
		return invalid(kind, "%s is not valid UTF-8", what)
	}
	for _, r := range s {
		if why := refuse(r); why != "" {
			return invalid(kind, "%s contains %s", what, why)
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

// Validate returns the error [Open] would return for cfg and, with opts,
// the error an acquisition with those options would return, without
// connecting. Tools check their input with it before anything connects.
func (cfg Config) Validate(opts ...Option) error {
	full, _, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	_, err = resolveOptions(&full, nil, entryAcquire, opts)
	return err
}

// Plan is what an acquisition of a name with given options contends for,
// and the local timing of the lease it gets (see the package
// documentation), as [Config.Plan] computes them without connecting.
type Plan struct {
	// Names are the lease rows the acquisition contends for, as the lease
	// table and [Lease.Name] spell them: the name itself, or with
	// [WithSlots](n), n > 1, its slot names "name#0" to "name#<n-1>". The
	// lease it gets is one of them. Tools that read the lease table for a
	// lease of their own (a scheduler checking whether a run's holder is
	// alive) find its rows here.
	Names []string
	// TTL is the lease's time-to-live on the server.
	TTL time.Duration
	// RenewInterval: a renewal is sent this long after the previous
	// successful one (or the acquisition) was sent.
	RenewInterval time.Duration
	// SafetyMargin: the local deadline ([Lease.Deadline]) is TTL minus
	// SafetyMargin after the send time of the last successful renewal.
	SafetyMargin time.Duration
	// MinHold: a release before this long after the acquisition keeps the
	// row held until then ([WithMinHold]); 0 without.
	MinHold time.Duration
}

// Plan returns what cfg makes of an acquisition of name with opts: the
// rows it contends for and its lease's timing (its TTL from [WithTTL],
// else the TTL of cfg or its default). Without connecting, it returns the
// error the acquisition would return for its input: [Config.Validate]'s,
// or an *[InvalidError] of kind "lease name". A lease name is 1–255 bytes
// of valid UTF-8 without NUL, not ending in '#' and digits after at least
// one other byte ("job#0" is refused; "job#", "#0" and "job#0x" are not):
// that form is reserved for the slots of semaphores ("job#0" is slot 0 of
// "job"), so that a lease name never meets a slot's; with [WithSlots] the
// slot names must fit in 255 bytes too. Every call that acquires checks
// its name so; [Client.Get], admin.ForceRelease and
// [Client.RequestStepDown] also accept slot names, to reach slot rows.
func (cfg Config) Plan(name string, opts ...Option) (Plan, error) {
	if err := checkName(name); err != nil {
		return Plan{}, err
	}
	full, _, err := cfg.withDefaults()
	if err != nil {
		return Plan{}, err
	}
	o, err := resolveOptions(&full, nil, entryAcquire, opts)
	if err != nil {
		return Plan{}, err
	}
	if err := o.checkSlotNames(name); err != nil {
		return Plan{}, err
	}
	return Plan{Names: kindOf(entryAcquire, &o).rows(name, &o), TTL: o.ttl, RenewInterval: renewFor(&full, o.ttl),
		SafetyMargin: marginFor(&full, o.ttl), MinHold: o.minHold}, nil
}

// version is the version of this module, recorded in the metadata of
// every lease ("version"); a release bumps it (CONTRIBUTING.md). Programs
// read the version they were built with from their build information
// (runtime/debug.ReadBuildInfo), as 'pglease version' does.
const version = "0.1.0"

// defaultMetadata is recorded with every lease of a client.
func defaultMetadata() []byte {
	host, _ := os.Hostname()
	meta, _ := json.Marshal(map[string]any{"host": host, "pid": os.Getpid(), "version": version})
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
