package pglease

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/store"
)

// The parts of a Client and their locks. A Client is a facade over parts
// that each own their state and the mutex that guards it; a method that
// touches one part only is that part's. A goroutine that needs two of
// these locks takes them in this order, and never the other way round:
//
//	wake.mu      bell and session watchers (wakeups.go)
//	reg.mu       held leases, local slots, step-down hearers (registry.go)
//	conn.mu      the dedicated session's creation, its settings (connect.go)
//	schema.mu    what is known of the table (client.go)
//	renewer.mu   the renew loop's kick and schedule (renew.go)
//	session.mu, Lease.mu, Elector.mu
//	hub.mu, eventQueue.mu, inflight.mu
//	life.mu      closed, and the door for goroutines (lifecycle.go)
//
// (wake.mu is Client.wake.mu, and so on.) The four part locks at the top
// are never held together; each of them may be held while taking a lock
// below it (register holds reg.mu while it reads the session's epoch, arms
// the lease, kicks the renewer and starts the renew loop). life.mu is a
// leaf: nothing is taken under it. No lock is held across a statement,
// except schema.mu while the table is checked or migrated (nothing else is
// taken under it). docs/ARCHITECTURE.md lists the nestings that exist.

// Client acquires and keeps leases in one lease table. It is safe for
// concurrent use. Create it with [Open], [NewFromPool] or [NewFromDB]; no
// goroutine runs until the first lease is acquired or waited for. Close it
// to release its leases and stop its goroutines.
type Client struct {
	cfg    Config
	st     *store.Store
	db     store.DB // statements that need no session: acquire, release, admin
	id     string   // random id of this client, recorded with its leases
	meta   []byte   // default lease metadata
	events *eventQueue

	life    lifecycle   // closed, background context and goroutines, statements in flight
	conn    connection  // the pool's owner, the dedicated session and its settings
	schema  schemaState // what is known of the table
	reg     registry    // held leases, local slots, step-down hearers
	renewer renewer     // the renew loop's kick and schedule
	wake    wakeups     // notifications and the watchers of holders
}

// schemaState is what a client knows of its table. Its fields are
// guarded by mu, which is held while the table is checked or migrated.
type schemaState struct {
	mu    sync.Mutex
	ready bool // schema checked
	// readOK: the table exists and its rows are readable (Get, List),
	// checked without changing anything
	readOK bool
	// lostTable: a statement found the table missing after it had been
	// checked (tableLost); cleared once the table is checked again
	lostTable bool
}

// register hands leases just granted to the client: it holds them, arms
// their deadlines and renews them. It refuses them (ErrClosed) once the
// client is closed, and (errSessionGone) when the session a session-bound
// lease is bound to ended after the commit: sessionLost, which checks the
// held leases after the session's epoch changed, ran without it.
//
// All of it is one critical section of reg.mu, which is what makes it
// safe: Close marks the client closed before it takes (under reg.mu) the
// leases to release, so a lease is either refused here or released by
// Close; the session's epoch changes before sessionLost reads the held
// leases (under reg.mu), so a session-bound lease is either refused here
// or ended by sessionLost; and the renew loop is started while Close
// cannot have begun to wait for the client's goroutines (it waits only
// after it took the leases), so it starts.
func (c *Client) register(leases []*Lease) error {
	c.reg.mu.Lock()
	defer c.reg.mu.Unlock()
	if c.life.isClosed() {
		return ErrClosed
	}
	for _, l := range leases {
		if l.session && c.conn.sess.Load().currentEpoch() != l.epoch {
			return errSessionGone
		}
	}
	for _, l := range leases {
		c.reg.held[l.name] = l
		l.arm()
		c.startRenewer(l)
	}
	return nil
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
	c.conn.ownPool = pool
	c.conn.cfg = pcfg.ConnConfig.Copy()
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
	c.conn.cfg = pool.Config().ConnConfig.Copy()
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
	c.conn.sqlDB = db
	return c, nil
}

func newClient(cfg Config, st *store.Store, db store.DB) *Client {
	c := &Client{cfg: cfg, st: st, db: db, meta: defaultMetadata(), id: randomID()}
	c.life.init()
	c.reg.init()
	c.wake.init()
	c.events = &eventQueue{obs: cfg.Observer, client: c.id, start: c.life.goBackground, onPanic: func(r any) {
		c.cfg.Logger.ErrorContext(c.life.bg, "pglease: observer panicked", "panic", r)
	}}
	st.OnBlocked = func(e *store.BlockedError) {
		c.cfg.Logger.WarnContext(c.life.bg, "pglease: the migration of the lease table gave up on a lock that other sessions hold, so that other statements do not queue behind it; it is tried again",
			"table", e.Table, "attempt", e.Attempts, "blockers", e.Blockers)
	}
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

// ensureSchema runs Migrate once per client (or only checks the table when
// auto-migration is off).
func (c *Client) ensureSchema(ctx context.Context) error {
	c.schema.mu.Lock()
	ready := c.schema.ready
	c.schema.mu.Unlock()
	if ready {
		return nil
	}
	if c.cfg.DisableAutoMigrate {
		c.schema.mu.Lock()
		defer c.schema.mu.Unlock()
		// A missing table is reported as such (lost after use, or never
		// created), rather than as a table of another layout.
		if exists, err := c.st.CheckReadable(ctx, c.db); err == nil && !exists {
			if c.schema.lostTable {
				return c.lostTableError()
			}
			return errorf("%w: %s does not exist: create it with 'pglease migrate' (or admin.Migrate, or the statements of admin.DDL in a migration) as a role that may; this client does not, as Config.DisableAutoMigrate is set",
				ErrNoTable, c.st.Names.QualifiedTable())
		}
		if err := c.st.CheckShape(ctx, c.db); err != nil {
			return opError("check the lease table "+c.st.Names.QualifiedTable(), err)
		}
		c.schema.ready, c.schema.lostTable = true, false
		return nil
	}
	return c.migrate(ctx)
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
	c.schema.mu.Lock()
	defer c.schema.mu.Unlock()
	if !c.schema.ready && !c.schema.readOK {
		return
	}
	c.schema.ready, c.schema.readOK = false, false
	if lost {
		c.schema.lostTable = true
		c.cfg.Logger.WarnContext(c.life.bg, "pglease: the lease table (or its schema, or its waiters table) no longer exists: it was dropped, or lost in a failover or a restore; the client checks it again at its next call",
			"table", c.st.Names.QualifiedTable(), "auto_migrate", !c.cfg.DisableAutoMigrate)
	}
}

// lostTableError is the error of a call of a client with
// Config.DisableAutoMigrate that found its lease table gone after it had
// used it (tableLost).
func (c *Client) lostTableError() error {
	return errorf("%w: %s no longer exists: it was dropped, or lost in a failover or a restore, and the leases held in it ended with it; "+
		"recreate it with 'pglease migrate' (or admin.Migrate) as a role that owns its schema; this client does not, as Config.DisableAutoMigrate is set",
		ErrNoTable, c.st.Names.QualifiedTable())
}

// lostTableCause is the cause of the end of a lease whose row was in a
// lost table.
func (c *Client) lostTableCause() error {
	return &lostError{why: "the lease table " + c.st.Names.QualifiedTable() + " no longer exists (dropped, or lost in a failover or a restore), and the lease's row went with it"}
}

// closedErr reports a failure caused by Close (a cancelled statement, a
// closed pool) as [ErrClosed].
func (c *Client) closedErr(err error) error {
	if err != nil && !errors.Is(err, ErrClosed) && c.life.bg.Err() != nil {
		return ErrClosed
	}
	return err
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
	if !c.life.close() {
		return nil
	}
	// Closed first: register refuses leases from now on (see register).
	leases := c.reg.leases()

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
	c.life.calls.drain(releaseTimeout, c.life.stop)
	wg.Wait()
	if err := c.releaseOrphans(); err != nil {
		errs = append(errs, err)
	}
	c.life.stopAndWait() // the session loop too
	if c.conn.ownPool != nil {
		c.conn.ownPool.Close()
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
	Metadata     string        // JSON object

	// Kind is the row's kind of lease, as the table records it: "plain",
	// "semaphore" (a slot of a semaphore, [WithSlots]), "shared" (a shared
	// lease's row, [WithShared]), or the word of a kind a later version
	// adds, as it is. Test it by value (in.Kind == "shared"); a kind this
	// version does not know is described by Of, Size and Weight all the
	// same.
	Kind string
	// Of is the name the row belongs to: a semaphore slot's semaphore
	// ("pool" for "pool#3"), the name a shared lease's row "NAME#i"
	// shares, the name of a later kind's row; "" for a plain lease, whose
	// row is its name.
	Of string
	// Size is the size of the row's kind: a semaphore's slot count, a
	// later kind's capacity; 0 for a kind without one (plain and shared).
	Size int
	// Weight is how many units of Size the row takes: 1 for every kind so
	// far.
	Weight int
}

func infoOf(r store.Record) Info {
	return Info{Name: r.Name, Owner: r.Owner, Token: r.Token, AcquiredAt: r.AcquiredAt,
		RenewedAt: r.RenewedAt, ExpiresAt: r.ExpiresAt, TTL: r.TTL, Remaining: r.Remaining,
		HeartbeatAge: r.HeartbeatAge, HeldFor: r.HeldFor, FastFailover: r.SessionBound, Metadata: r.Metadata,
		Kind: r.Kind, Of: r.Of, Size: r.Size, Weight: r.Weight}
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
		return c.exec(ctx, func(ctx context.Context, q store.DB, _ *sessState) (err error) {
			rec, ok, err = c.st.Get(ctx, q, name)
			return err
		})
	})
	if err != nil {
		return Info{}, err
	}
	if !ok {
		return Info{}, errorf("%w: %q", ErrNoLease, name)
	}
	return infoOf(rec), nil
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
	if err := c.life.checkOpen(); err != nil {
		return false, err
	}
	c.schema.mu.Lock()
	ok := c.schema.ready || c.schema.readOK
	c.schema.mu.Unlock()
	if ok {
		return true, nil
	}
	return c.checkReadable(ctx)
}

// checkReadable is readable's check, made whatever it remembers, and
// remembered when it succeeds.
func (c *Client) checkReadable(ctx context.Context) (exists bool, err error) {
	err = c.retry(ctx, func() (err error) {
		exists, err = c.st.CheckReadable(ctx, c.db)
		return err
	})
	if err != nil {
		return false, opError("check the lease table "+c.st.Names.QualifiedTable(), err)
	}
	if exists {
		c.schema.mu.Lock()
		c.schema.readOK = true
		c.schema.mu.Unlock()
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
	if err := c.life.checkOpen(); err != nil {
		return err
	}
	return c.ensureSchema(ctx)
}

// prepareExisting is prepare for the administrative calls that act on rows
// already there (ForceRelease, RequestStepDown, Cleanup): a missing table
// is [ErrNoTable], never created, so that a mistyped table name changes
// nothing. A table that exists is checked, or upgraded, as by prepare.
func (c *Client) prepareExisting(ctx context.Context) error {
	if err := c.life.checkOpen(); err != nil {
		return err
	}
	c.schema.mu.Lock()
	ready := c.schema.ready
	c.schema.mu.Unlock()
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
		"admin.Migrate creates it", ErrNoTable, c.st.Names.QualifiedTable())
}
