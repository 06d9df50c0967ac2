package pglease

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/store"
)

// Client acquires and keeps leases in one lease table. It is safe for
// concurrent use. Create it with [Open], [NewFromPool] or [NewFromDB]; no
// goroutine runs until the first lease is acquired or waited for. Close it
// to release its leases and stop its goroutines.
type Client struct {
	// The client's resources, which the acquisition engine (engine.go),
	// the leases and the recipes on top (LeaseSet, Elector, step-down)
	// use through its methods: the pool, the dedicated session and its
	// notifications, the renewer, the held leases and their local slots,
	// and the background goroutines.
	cfg     Config
	st      *store.Store
	db      store.DB      // statements that need no session: acquire, release, admin
	ownPool *pgxpool.Pool // closed by Close when Open created it
	sqlDB   *sql.DB       // set by NewFromDB
	connCfg *pgx.ConnConfig
	events  *eventQueue
	meta    []byte // default lease metadata
	id      string // random id of this client, recorded with its leases

	bg     context.Context // lifetime of background work
	stop   context.CancelFunc
	wg     sync.WaitGroup // background goroutines, started by goBackground
	wgMu   sync.Mutex     // orders wg.Add before Close's wg.Wait
	wgDone bool           // under wgMu: Close waits; nothing more may start
	hub    hub            // routes notifications to local waiters (notify.go)
	calls  inflight       // acquisition statements in flight (shutdown.go)
	sess   *session       // dedicated connection, created lazily (session.go)
	schema sync.Mutex
	ready  bool // schema checked
	// readOK: the table exists and its rows are readable (Get, List),
	// checked without changing anything
	readOK bool
	// lostTable: a statement found the table missing after it had been
	// checked (tableLost); cleared once the table is checked again
	lostTable bool

	mu     sync.Mutex
	closed bool
	held   map[string]*Lease     // the leases handed out (register, forget)
	locals map[string]*localSlot // localmutex.go
	// watchers: session watchers by holder session (backend pid), shared
	// by local waiters (failover.go)
	watchers map[int32]*sessionWatcher
	// bells: bell watchers by holder client id, shared by local waiters
	// (doorbell.go)
	bells map[string]*bellWatcher
	// listenLinger: see listen.go; hearing: the held leases whose
	// holders hear step-down requests (Lease.StepDownRequested)
	listenLinger time.Duration
	// watchTimeout: how long one statement of a watcher waits on the
	// server (see watchTimeout in doorbell.go; tests shorten it)
	watchTimeout time.Duration
	hearing      int
	renewer      chan struct{} // kicks the renew loop; nil until started (renew.go)
	nextDue      time.Time     // when the renew loop will next renew
}

// register hands leases just granted to the client: it holds them, arms
// their deadlines and renews them. It refuses them (ErrClosed) once the
// client is closed, and (errSessionGone) when the session a session-bound
// lease is bound to ended after the commit: sessionLost, which checks the
// held leases after the session's epoch changed, ran without it.
func (c *Client) register(leases []*Lease) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for _, l := range leases {
		if l.session && c.sess.currentEpoch() != l.epoch {
			return errSessionGone
		}
	}
	for _, l := range leases {
		c.held[l.name] = l
		l.arm()
		c.startRenewer(l)
	}
	return nil
}

// forget drops l, which has ended, from the leases the client holds.
func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[l.name] == l {
		delete(c.held, l.name)
		if l.hearStepDown {
			c.hearing--
		}
	}
}

// heldLease returns the client's lease of name, or nil.
func (c *Client) heldLease(name string) *Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[name]
}

// heldLeases returns the leases the client holds.
func (c *Client) heldLeases() []*Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Lease, 0, len(c.held))
	for _, l := range c.held {
		out = append(out, l)
	}
	return out
}

// Open connects to the database named by dsn (a URL or key=value string;
// empty values come from the PG* environment variables, .pgpass and
// pg_service.conf, as with libpq) and returns a client that owns its pool.
// It fails unless a first connection succeeds within the connect timeout.
func Open(ctx context.Context, dsn string, cfg Config) (*Client, error) {
	cfg, st, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, invalid(kindArgument, "DSN: %w", err)
	}
	pcfg.MaxConns = cfg.MaxConns
	// An idle client keeps its dedicated session alone: the pool's idle
	// connections close after poolIdleTime, unless the DSN says otherwise.
	if !strings.Contains(dsn, "pool_max_conn_idle_time") {
		pcfg.MaxConnIdleTime = poolIdleTime
	}
	if !strings.Contains(dsn, "pool_health_check_period") && pcfg.MaxConnIdleTime > 0 {
		// (0 keeps idle connections for ever; the period must stay
		// positive.)
		pcfg.HealthCheckPeriod = min(pcfg.HealthCheckPeriod, pcfg.MaxConnIdleTime/2)
	}
	if cfg.ConnectTimeout > 0 {
		pcfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	} else if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = defaultConnTimeout
	}
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		pcfg.ConnConfig.RuntimeParams["application_name"] = appName(cfg.Owner)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, invalid(kindArgument, "DSN: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, pcfg.ConnConfig.ConnectTimeout*time.Duration(hostCount(pcfg.ConnConfig)))
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if store.FromServer(err) {
			return nil, opError("connect", err)
		}
		return nil, errorf("connect: %w (is the server running and the DSN right?)", err)
	}
	c := newClient(cfg, st, store.Pgx(pool))
	c.ownPool = pool
	c.connCfg = pcfg.ConnConfig.Copy()
	return c, nil
}

// poolIdleTime is how long a connection of a pool that Open created stays
// open unused: a client that holds nothing and waits for nothing keeps
// only its dedicated session (the test shortens it).
var poolIdleTime = 30 * time.Second

// NewFromPool returns a client that uses a pool the caller owns; pglease
// never closes it. A dedicated connection for renewals and notifications is
// opened with the pool's connection settings.
func NewFromPool(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, invalid(kindArgument, "NewFromPool: pool is nil")
	}
	cfg, st, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := newClient(cfg, st, store.Pgx(pool))
	c.connCfg = pool.Config().ConnConfig.Copy()
	return c, nil
}

// NewFromDB returns a client that uses a database/sql handle the caller owns
// (lib/pq, pgx's stdlib driver, and anything built on them: sqlx, GORM,
// ent). With pgx's stdlib driver every feature is available; with other
// drivers notifications and fast failover are not (waiters poll), and
// renewals use one connection held from the handle's pool.
func NewFromDB(db *sql.DB, cfg Config) (*Client, error) {
	if db == nil {
		return nil, invalid(kindArgument, "NewFromDB: db is nil")
	}
	cfg, st, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := newClient(cfg, st, store.SQL(db, func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) }))
	c.sqlDB = db
	return c, nil
}

func newClient(cfg Config, st *store.Store, db store.DB) *Client {
	c := &Client{cfg: cfg, st: st, db: db, held: map[string]*Lease{}, locals: map[string]*localSlot{}, watchers: map[int32]*sessionWatcher{}, bells: map[string]*bellWatcher{}, listenLinger: listenLinger, watchTimeout: watchTimeout, meta: defaultMetadata(), id: randomID()}
	c.bg, c.stop = context.WithCancel(context.Background())
	c.events = &eventQueue{obs: cfg.Observer, client: c.id, start: c.goBackground, onPanic: func(r any) {
		c.cfg.Logger.ErrorContext(c.bg, "pglease: observer panicked", "panic", r)
	}}
	c.hub.init()
	st.OnBlocked = func(e *store.BlockedError) {
		c.cfg.Logger.WarnContext(c.bg, "pglease: the migration of the lease table gave up on a lock that other sessions hold, so that other statements do not queue behind it; it is tried again",
			"table", e.Table, "attempt", e.Attempts, "blockers", e.Blockers)
	}
	c.calls.init()
	return c
}

func appName(owner string) string {
	name := "pglease " + owner
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// Owner returns the owner label of this client's leases.
func (c *Client) Owner() string { return c.cfg.Owner }

// DDL returns the SQL that creates the lease table "[schema.]table" (empty
// means the default, "pglease_leases") and its token sequence, for users'
// own migration tools; it is idempotent. An invalid name is reported as
// an *[InvalidError] of kind "identifier".
func DDL(table string) (string, error) {
	st, err := newStore(table)
	if err != nil {
		return "", err
	}
	return st.DDL(), nil
}

// Migrate creates the lease table and its sequence when missing and checks
// the layout of an existing table. Clients do this before their first
// acquisition, and again before the next one once they found their table
// gone (its leases in it end when it finds that, at its next renewal at the
// latest), unless [Config.DisableAutoMigrate] is
// set;
// [Client.ForceRelease], [Client.RequestStepDown] and [Client.Cleanup] do
// it only for a table that exists (they never create one: [ErrNoTable]),
// and [Client.Get] and [Client.List] never do. Any number of clients may migrate at once, each spelling the table
// its own way ("pglease_leases", "public.pglease_leases", another
// search_path): they serialize on a lock of the table's schema as the
// server resolves it, so exactly one creates or upgrades what is missing.
// Its locks of the tables are taken with a short lock_timeout (200 ms): a
// migration behind an open transaction on the tables (a report, pg_dump)
// gives up, so that renewals and other statements never queue behind it
// for longer, logs a warning naming the sessions that hold the locks, and
// tries again, with growing pauses, until ctx ends; its error then names
// those sessions and matches ctx's error.
func (c *Client) Migrate(ctx context.Context) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	c.schema.Lock()
	defer c.schema.Unlock()
	if err := c.st.EnsureSchema(ctx, c.db); err != nil {
		return opError("create the lease table "+c.st.Names.QualifiedTable(), err)
	}
	if c.lostTable {
		c.cfg.Logger.WarnContext(ctx, "pglease: the lease table had disappeared (dropped, or lost in a failover or a restore) and was migrated again, created anew if no other client had done so first;"+
			" a new token sequence starts at the server clock in microseconds, above the tokens the lost one handed out", "table", c.st.Names.QualifiedTable())
	}
	c.ready, c.lostTable = true, false
	return nil
}

// ensureSchema runs Migrate once per client (or only checks the table when
// auto-migration is off).
func (c *Client) ensureSchema(ctx context.Context) error {
	c.schema.Lock()
	ready := c.ready
	c.schema.Unlock()
	if ready {
		return nil
	}
	if c.cfg.DisableAutoMigrate {
		c.schema.Lock()
		defer c.schema.Unlock()
		// A missing table is reported as such (lost after use, or never
		// created), rather than as a table of another layout.
		if exists, err := c.st.CheckReadable(ctx, c.db); err == nil && !exists {
			if c.lostTable {
				return c.lostTableError()
			}
			return errorf("%w: %s does not exist: create it with 'pglease migrate' (or Client.Migrate, or the statements of DDL in a migration) as a role that may; this client does not, as Config.DisableAutoMigrate is set",
				ErrNoTable, c.st.Names.QualifiedTable())
		}
		if err := c.st.CheckShape(ctx, c.db); err != nil {
			return opError("check the lease table "+c.st.Names.QualifiedTable(), err)
		}
		c.ready, c.lostTable = true, false
		return nil
	}
	return c.Migrate(ctx)
}

// tableLost reports whether err says that the lease table (its schema, or
// its waiters table) does not exist, or that one of its functions does
// not exist while the table does not either (a statement that looked the
// function up just before a DROP SCHEMA committed). If so, and the client
// had checked the table, it was lost since: dropped, or missing on a new
// primary after a failover or in a restored database. The client then
// forgets its check, so that its next call checks the table again: with
// auto-migration it creates it anew (its token sequence seeded above the
// tokens the lost one handed out: see SeedSequence in
// internal/store/queries.sql), and with [Config.DisableAutoMigrate] the
// call fails at once with lostTableError. A function missing beside the
// table makes the client forget its check too (the next call reinstalls
// the functions, or reports them missing), but is no loss.
func (c *Client) tableLost(ctx context.Context, err error) bool {
	switch store.Classify(err) {
	case store.KindMissing:
	case store.KindMissingFunction:
		c.forgetCheck(false)
		exists, cerr := c.st.CheckReadable(ctx, c.db)
		if cerr != nil || exists {
			return false
		}
	default:
		return false
	}
	c.forgetCheck(true)
	return true
}

// forgetCheck makes the client check its table again at its next call;
// lost: the table was found gone.
func (c *Client) forgetCheck(lost bool) {
	c.schema.Lock()
	defer c.schema.Unlock()
	if !c.ready && !c.readOK {
		return
	}
	c.ready, c.readOK = false, false
	if lost {
		c.lostTable = true
		c.cfg.Logger.WarnContext(c.bg, "pglease: the lease table (or its schema, or its waiters table) no longer exists: it was dropped, or lost in a failover or a restore; the client checks it again at its next call",
			"table", c.st.Names.QualifiedTable(), "auto_migrate", !c.cfg.DisableAutoMigrate)
	}
}

// lostTableError is the error of a call of a client with
// Config.DisableAutoMigrate that found its lease table gone after it had
// used it (tableLost).
func (c *Client) lostTableError() error {
	return errorf("%w: %s no longer exists: it was dropped, or lost in a failover or a restore, and the leases held in it ended with it; "+
		"recreate it with 'pglease migrate' (or Client.Migrate) as a role that owns its schema; this client does not, as Config.DisableAutoMigrate is set",
		ErrNoTable, c.st.Names.QualifiedTable())
}

// lostTableCause is the cause of the end of a lease whose row was in a
// lost table.
func (c *Client) lostTableCause() error {
	return &lostError{why: "the lease table " + c.st.Names.QualifiedTable() + " no longer exists (dropped, or lost in a failover or a restore), and the lease's row went with it"}
}

// goBackground runs fn on a goroutine that Close waits for. Once Close has
// begun waiting it starts nothing and returns false.
func (c *Client) goBackground(fn func()) bool {
	c.wgMu.Lock()
	defer c.wgMu.Unlock()
	if c.wgDone {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
	return true
}

// closedErr reports a failure caused by Close (a cancelled statement, a
// closed pool) as [ErrClosed].
func (c *Client) closedErr(err error) error {
	if err != nil && !errors.Is(err, ErrClosed) && c.bg.Err() != nil {
		return ErrClosed
	}
	return err
}

func (c *Client) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// Close releases every lease the client holds, and what its acquisitions
// in flight are granted: a call that returned when its context ended has
// its statement still running, and Close waits for it rather than cut it,
// so that the row it may be granted is released too; a statement whose
// reply was lost leaves a row of this client's, which Close finds and
// releases. Close then stops the client's goroutines and waits for them,
// and closes the pool if [Open] created it. Leases end with [ErrClosed].
//
// Close is bounded when the database does not answer: it waits at most
// 5 s for the statements in flight (then cuts them), and 5 s for the
// releases after them; closing a pool that [Open] created may then wait
// for pgx to close the connections of the cut statements (pgx allows
// itself 15 s). An error names what Close could not release; those rows
// expire after their TTL. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	leases := make([]*Lease, 0, len(c.held))
	for _, l := range c.held {
		leases = append(leases, l)
	}
	c.mu.Unlock()

	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.release(context.Background(), ErrClosed); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	c.calls.drain(releaseTimeout, c.stop)
	wg.Wait()
	if err := c.releaseOrphans(); err != nil {
		errs = append(errs, err)
	}
	c.stop()
	c.wgMu.Lock()
	c.wgDone = true
	c.wgMu.Unlock()
	c.wg.Wait()
	if c.sess != nil {
		c.sess.wait()
	}
	if c.ownPool != nil {
		c.ownPool.Close()
	}
	return errors.Join(errs...)
}

// Info describes a lease row as the server sees it. Durations are computed
// with the server's clock, so they are the tests to make: the lease was
// held when read if Remaining > 0, and it is stale (its holder may be
// alive but stuck, a zombie) if it is held and HeartbeatAge exceeds a
// threshold of the reader's (pglease ls says "stale" past TTL/2, as
// renewals run every third of the TTL).
type Info struct {
	Name         string
	Owner        string
	Token        int64
	AcquiredAt   time.Time     // server time
	RenewedAt    time.Time     // server time of the last heartbeat
	ExpiresAt    time.Time     // server time
	TTL          time.Duration //
	Remaining    time.Duration // until expiry; zero or negative once expired
	HeartbeatAge time.Duration // since the last heartbeat
	HeldFor      time.Duration // since acquisition
	FastFailover bool          // acquired with WithFastFailover: bound to its holder's database session
	Shared       bool          // a shared lease's row ([WithShared]): Name is "NAME#i" of the name NAME it shares
	Metadata     string        // JSON object
}

func infoOf(r store.Record) Info {
	return Info{Name: r.Name, Owner: r.Owner, Token: r.Token, AcquiredAt: r.AcquiredAt,
		RenewedAt: r.RenewedAt, ExpiresAt: r.ExpiresAt, TTL: r.TTL, Remaining: r.Remaining,
		HeartbeatAge: r.HeartbeatAge, HeldFor: r.HeldFor, FastFailover: r.SessionBound, Shared: r.Shared, Metadata: r.Metadata}
}

// Get returns the lease row of name, held or expired, or [ErrNoLease].
// name may be a slot's ("name#i", see [WithSlots]).
// It only reads: it never creates or alters the table, whatever
// [Config.DisableAutoMigrate] says, and a role with SELECT on the table
// (and USAGE on its schema) may call it. Without the table it returns
// [ErrNoLease]; a table this version cannot read is reported as
// [ErrSchema].
func (c *Client) Get(ctx context.Context, name string) (Info, error) {
	if err := checkRowName(name); err != nil {
		return Info{}, err
	}
	var rec store.Record
	var ok bool
	err := c.read(ctx, "read lease", func() (err error) {
		rec, ok, err = c.st.Get(ctx, c.db, name)
		return err
	})
	if err != nil {
		return Info{}, err
	}
	if !ok {
		return Info{}, errorf("%w: %q", ErrNoLease, name)
	}
	return infoOf(rec), nil
}

// List returns every lease row, held or expired, ordered by name. Like
// [Client.Get] it only reads and needs only SELECT on the table; without
// the table it returns an empty slice.
func (c *Client) List(ctx context.Context) ([]Info, error) {
	var recs []store.Record
	err := c.read(ctx, "list leases", func() (err error) {
		recs, err = c.st.List(ctx, c.db)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Info, len(recs))
	for i, r := range recs {
		out[i] = infoOf(r)
	}
	return out, nil
}

// ForceRelease deletes the lease of name whoever holds it, wakes waiters,
// and returns what it deleted; name may be a slot's ("name#i"). It is an
// administrative action: the holder learns of it at its next renewal and
// its lease ends with [ErrLeaseLost]. It returns [ErrNoLease] when the
// table has no row for name, and [ErrNoTable] when there is no table: it
// never creates one.
func (c *Client) ForceRelease(ctx context.Context, name string) (Info, error) {
	if err := checkRowName(name); err != nil {
		return Info{}, err
	}
	if err := c.prepareExisting(ctx); err != nil {
		return Info{}, err
	}
	rec, ok, err := c.st.ForceRelease(ctx, c.db, name)
	if err != nil {
		return Info{}, c.existingError(ctx, "force-release", err)
	}
	if !ok {
		return Info{}, errorf("%w: %q", ErrNoLease, name)
	}
	return infoOf(rec), nil
}

// Cleanup deletes expired rows and returns how many. Tokens are unaffected:
// they keep increasing. Without the table it returns [ErrNoTable]: it
// never creates one.
func (c *Client) Cleanup(ctx context.Context) (int64, error) {
	if err := c.prepareExisting(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := c.retry(ctx, func() (err error) {
		n, err = c.st.Cleanup(ctx, c.db)
		return err
	})
	if err != nil {
		return 0, c.existingError(ctx, "clean up", err)
	}
	return n, nil
}

// retry runs a statement that may be sent again when its connection failed
// (a server restart leaves stale connections in the pool; the first use of
// each fails): reads, and deletes of expired rows. At most three tries.
func (c *Client) retry(ctx context.Context, fn func() error) error {
	b := retryRead.start()
	for try := 0; ; try++ {
		err := fn()
		if err == nil || try == 2 || !store.ConnectionFailed(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(b.next()):
		case <-ctx.Done():
			return err
		}
	}
}

// readable checks that the client is open and, without changing anything,
// that its table can be read; exists is false when there is no table.
// After a full check (ready) or a first successful one, it sends nothing.
func (c *Client) readable(ctx context.Context) (exists bool, err error) {
	if err := c.checkOpen(); err != nil {
		return false, err
	}
	c.schema.Lock()
	ok := c.ready || c.readOK
	c.schema.Unlock()
	if ok {
		return true, nil
	}
	err = c.retry(ctx, func() (err error) {
		exists, err = c.st.CheckReadable(ctx, c.db)
		return err
	})
	if err != nil {
		return false, opError("check the lease table "+c.st.Names.QualifiedTable(), err)
	}
	if exists {
		c.schema.Lock()
		c.readOK = true
		c.schema.Unlock()
	}
	return exists, nil
}

// read runs fn, a read of the table (retried like every read), unless the
// table does not exist; for a read, no table means no rows, also when it
// is dropped after the check.
func (c *Client) read(ctx context.Context, what string, fn func() error) error {
	exists, err := c.readable(ctx)
	if err != nil || !exists {
		return err
	}
	// A table dropped after the check: for a read, no table means no
	// leases.
	if err := c.retry(ctx, fn); err != nil && !c.tableLost(ctx, err) {
		return opError(what, err)
	}
	return nil
}

// prepare checks that the client is open and its table usable.
func (c *Client) prepare(ctx context.Context) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	return c.ensureSchema(ctx)
}

// prepareExisting is prepare for the administrative calls that act on rows
// already there (ForceRelease, RequestStepDown, Cleanup): a missing table
// is [ErrNoTable], never created, so that a mistyped table name changes
// nothing. A table that exists is checked, or upgraded, as by prepare.
func (c *Client) prepareExisting(ctx context.Context) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	c.schema.Lock()
	ready := c.ready
	c.schema.Unlock()
	if !ready {
		var exists bool
		err := c.retry(ctx, func() (err error) {
			exists, err = c.st.CheckReadable(ctx, c.db)
			return err
		})
		if err != nil {
			return opError("check the lease table "+c.st.Names.QualifiedTable(), err)
		}
		if !exists {
			return c.noTable()
		}
	}
	return c.ensureSchema(ctx)
}

// existingError is opError for the calls of prepareExisting: a table
// dropped after the check is [ErrNoTable] too.
func (c *Client) existingError(ctx context.Context, op string, err error) error {
	if c.tableLost(ctx, err) {
		return c.noTable()
	}
	return opError(op, err)
}

func (c *Client) noTable() error {
	return errorf("%w: %s does not exist in this database (nothing was created or changed): check the table's name; "+
		"Client.Migrate creates it", ErrNoTable, c.st.Names.QualifiedTable())
}
