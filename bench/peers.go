package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // pglock's own driver

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// errBusy is returned by a lock that does not block when the name is held
// elsewhere.
var errBusy = errors.New("busy")

// unlock releases one held lock.
type unlock func(ctx context.Context) error

// locker is one client of a lock service, as one process would have it.
// lock takes name: with block it waits until name is free or ctx ends,
// without it returns errBusy when name is held elsewhere. lock is safe for
// concurrent use on distinct names; blocking on one name from several
// goroutines is supported by every locker (each call is a separate
// contender).
type locker interface {
	lock(ctx context.Context, name string, block bool) (unlock, error)
	close()
}

// peerOpts configures one locker.
type peerOpts struct {
	ttl      time.Duration // 0: the peer's default
	conns    int32         // pool size hint for concurrent use
	oneConn  bool          // advisory: all locks on one session (distinct names only)
	tableTag string        // table name suffix, so scenarios do not share rows
}

// ttlOr returns the configured TTL, or def when none is.
func (o peerOpts) ttlOr(def time.Duration) time.Duration {
	if o.ttl > 0 {
		return o.ttl
	}
	return def
}

type peer struct {
	id      string
	title   string
	backend string        // pg, redis, etcd
	defTTL  time.Duration // the peer's default TTL; 0 = none (n/a)
	renews  bool          // keeps a held lock alive by itself or through our loop; the upsert references do not (not run in S4–S6)
	open    func(ctx context.Context, e *env, o peerOpts) (locker, error)
}

var peers = []*peer{
	{id: "pglease", title: "pglease", backend: "pg", defTTL: 30 * time.Second, renews: true, open: openPglease(false)},
	{id: "pglease-ff", title: "pglease FastFailover", backend: "pg", defTTL: 30 * time.Second, renews: true, open: openPglease(true)},
	{id: "ref", title: "upsert reference", backend: "pg", open: openRef(0)},
	{id: "ref50", title: "upsert reference, 50 ms polling", backend: "pg", open: openRef(50 * time.Millisecond)},
	{id: "ref-notify", title: "upsert reference with notifications", backend: "pg", open: openRefNotify},
	{id: "advisory", title: "advisory lock", backend: "pg", renews: true, open: openAdvisory},
	{id: "pglock", title: "cirello.io/pglock", backend: "pg", defTTL: pglock.DefaultLeaseDuration, renews: true, open: openPglock},
	{id: "redsync", title: "redsync", backend: "redis", defTTL: 8 * time.Second, renews: true, open: openRedsync},
	{id: "redislock", title: "bsm/redislock", backend: "redis", renews: true, open: openRedislock},
	{id: "etcd", title: "etcd Mutex", backend: "etcd", defTTL: 60 * time.Second, renews: true, open: openEtcd},
}

func peerByID(id string) *peer {
	for _, p := range peers {
		if p.id == id {
			return p
		}
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func key64(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// newPool opens a pgx pool of at least 4 connections.
func newPool(ctx context.Context, dsn string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = max(conns, 4)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// ---- pglease ----

type pgleaseLocker struct {
	c    *pglease.Client
	opts []pglease.Option
	ff   bool // opts has WithFastFailover (peer pglease-ff)
}

func openPglease(ff bool) func(ctx context.Context, e *env, o peerOpts) (locker, error) {
	return func(ctx context.Context, e *env, o peerOpts) (locker, error) {
		cfg := pglease.Config{Table: "pglease_leases" + o.tableTag}
		if o.conns > 0 {
			cfg.MaxConns = o.conns
		}
		c, err := pglease.Open(ctx, e.dsn, cfg)
		if err != nil {
			return nil, err
		}
		if err := admin.Migrate(ctx, c); err != nil {
			c.Close()
			return nil, err
		}
		l := &pgleaseLocker{c: c, ff: ff}
		if o.ttl > 0 {
			l.opts = append(l.opts, pglease.WithTTL(o.ttl))
		}
		if ff {
			l.opts = append(l.opts, pglease.WithFastFailover())
		}
		return l, nil
	}
}

func (p *pgleaseLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	return p.lockWith(ctx, name, block)
}

// lockWith is lock with extra options added to the locker's own (S7's
// holder topologies: WithFastFailover, WithShared).
func (p *pgleaseLocker) lockWith(ctx context.Context, name string, block bool, extra ...pglease.Option) (unlock, error) {
	acquire := p.c.TryAcquire
	if block {
		acquire = p.c.Acquire
	}
	l, err := acquire(ctx, name, append(slices.Clip(p.opts), extra...)...)
	if errors.Is(err, pglease.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (p *pgleaseLocker) close() { _ = p.c.Close() }

// ---- the single-statement reference ----

// refLocker is the physical limit of a table lease: one INSERT … ON
// CONFLICT DO UPDATE … WHERE expired RETURNING statement with a fencing
// token from a sequence, and a DELETE scoped by token whose commit does not
// wait for the WAL flush (a release lost in a crash only delays the next
// holder). It neither renews nor notifies: a blocking lock polls every
// 1–3 ms (poll 0), the fastest a table lease without notifications can
// hand over, at the price of a statement per poll; with poll > 0 it polls
// every poll instead, as a lease table with an ordinary poll interval
// would (peer ref50).
type refLocker struct {
	pool  *pgxpool.Pool
	table string
	ttl   time.Duration
	owner string
	poll  time.Duration
	bell  *notifyBell // peer ref-notify: waits for a release's notification
}

func openRef(poll time.Duration) func(ctx context.Context, e *env, o peerOpts) (locker, error) {
	return func(ctx context.Context, e *env, o peerOpts) (locker, error) {
		pool, err := newPool(ctx, e.dsn, o.conns)
		if err != nil {
			return nil, err
		}
		table := "ref_leases" + o.tableTag
		_, err = pool.Exec(ctx, fmt.Sprintf(`
CREATE SEQUENCE IF NOT EXISTS %[1]s_token;
CREATE TABLE IF NOT EXISTS %[1]s (name text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL, expires_at timestamptz NOT NULL)`, table))
		if err != nil && !isDuplicate(err) {
			pool.Close()
			return nil, err
		}
		return &refLocker{pool: pool, table: table, ttl: o.ttlOr(30 * time.Second), owner: "ref-" + randHex(4), poll: poll}, nil
	}
}

// openRefNotify opens the upsert reference whose blocked locks wait for a
// release's notification instead of polling (see notifyBell).
func openRefNotify(ctx context.Context, e *env, o peerOpts) (locker, error) {
	l, err := openRef(0)(ctx, e, o)
	if err != nil {
		return nil, err
	}
	r := l.(*refLocker)
	if r.bell, err = openNotifyBell(ctx, e.dsn, r.table); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// pollDelay is the wait before attempt i+1 of a blocked lock. With a poll
// interval the first wait is a random part of it: waiters that block at
// the same moment poll at random phases, as separate processes would, not
// in step.
func (r *refLocker) pollDelay(i int) time.Duration {
	switch {
	case r.poll <= 0:
		return time.Millisecond + mrand.N(2*time.Millisecond+1)
	case i == 0:
		return 1 + mrand.N(r.poll)
	default:
		return r.poll
	}
}

func isDuplicate(err error) bool {
	// Concurrent CREATE … IF NOT EXISTS may race on the catalog.
	return err != nil && (strings.Contains(err.Error(), "duplicate key") || strings.Contains(err.Error(), "already exists"))
}

func (r *refLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	var token int64
	for i := 0; ; i++ {
		var rang <-chan struct{}
		if r.bell != nil {
			rang = r.bell.current()
		}
		err := r.pool.QueryRow(ctx, `
INSERT INTO `+r.table+` AS l (name, owner, token, expires_at)
VALUES ($1, $2, nextval('`+r.table+`_token'), now() + $3::bigint * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, expires_at = excluded.expires_at
 WHERE l.expires_at <= now()
RETURNING token`, name, r.owner, r.ttl.Milliseconds()).Scan(&token)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		if !block {
			return nil, errBusy
		}
		if r.bell != nil {
			select {
			case <-rang:
			case <-time.After(fallbackWait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		if sleepCtx(ctx, r.pollDelay(i)); ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return func(ctx context.Context) error {
		if r.bell != nil {
			_, err := r.pool.Exec(ctx, `
WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),
     d AS (DELETE FROM `+r.table+` WHERE name = $1 AND token = $2 AND (SELECT true FROM async) RETURNING name)
SELECT pg_notify($3, d.name) FROM d`, name, token, r.table)
			return err
		}
		_, err := r.pool.Exec(ctx, `
WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM `+r.table+` WHERE name = $1 AND token = $2 AND (SELECT true FROM async)`, name, token)
		return err
	}, nil
}

func (r *refLocker) close() {
	if r.bell != nil {
		r.bell.close()
	}
	r.pool.Close()
}

// ---- raw advisory locks ----

// advisoryLocker holds each lock on a connection of its own (a session lock
// is re-entrant within its session, so contenders need separate sessions),
// or, with oneConn, every lock on one connection.
type advisoryLocker struct {
	pool *pgxpool.Pool
	mu   sync.Mutex
	one  *pgxpool.Conn
}

func openAdvisory(ctx context.Context, e *env, o peerOpts) (locker, error) {
	pool, err := newPool(ctx, e.dsn, o.conns)
	if err != nil {
		return nil, err
	}
	a := &advisoryLocker{pool: pool}
	if o.oneConn {
		if a.one, err = pool.Acquire(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return a, nil
}

// lock never blocks on the shared connection (oneConn: distinct names only).
func (a *advisoryLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	k := key64(name)
	if a.one != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		if err := tryAdvisory(ctx, a.one, k); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			_, err := a.one.Exec(ctx, "SELECT pg_advisory_unlock($1)", k)
			return err
		}, nil
	}
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if block {
		if _, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
			conn.Conn().Close(context.Background()) // cancelled: the session may still get the lock
		}
	} else {
		err = tryAdvisory(ctx, conn, k)
	}
	if err != nil {
		conn.Release()
		return nil, err
	}
	return func(ctx context.Context) error {
		defer conn.Release()
		_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", k)
		return err
	}, nil
}

// tryAdvisory takes session lock k on conn, or returns errBusy.
func tryAdvisory(ctx context.Context, conn *pgxpool.Conn, k int64) error {
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || ok {
		return err
	}
	return errBusy
}

func (a *advisoryLocker) close() {
	if a.one != nil {
		a.one.Release()
	}
	a.pool.Close()
}

// ---- cirello.io/pglock ----

type pglockLocker struct {
	db *sql.DB
	c  *pglock.Client
}

func openPglock(ctx context.Context, e *env, o peerOpts) (locker, error) {
	db, err := sql.Open("postgres", e.dsn)
	if err != nil {
		return nil, err
	}
	// A bounded pool, as a production user would configure it: unbounded,
	// 10,000 heartbeat goroutines open connections faster than the server
	// accepts them.
	db.SetMaxOpenConns(int(max(o.conns, 4)))
	db.SetMaxIdleConns(int(max(o.conns, 4)))
	table := "pglock_locks" + o.tableTag
	opts := []pglock.ClientOption{pglock.WithCustomTable(table)}
	if o.ttl > 0 {
		opts = append(opts, pglock.WithLeaseDuration(o.ttl), pglock.WithHeartbeatFrequency(o.ttl/4))
	}
	c, err := pglock.New(db, opts...)
	if err != nil {
		return nil, err
	}
	if err := c.TryCreateTable(); err != nil && !isDuplicate(err) {
		db.Close()
		return nil, err
	}
	return &pglockLocker{db: db, c: c}, nil
}

func (p *pglockLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	// The heartbeat context must outlive the call (pglock ties it to the
	// acquire context otherwise).
	opts := []pglock.LockOption{pglock.WithCustomHeartbeatContext(context.Background())}
	if !block {
		opts = append(opts, pglock.FailIfLocked())
	}
	l, err := p.c.AcquireContext(ctx, name, opts...)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, pglock.ErrNotAcquired):
		return nil, errBusy
	case err != nil:
		return nil, err
	}
	return func(ctx context.Context) error { return p.c.ReleaseContext(ctx, l) }, nil
}

func (p *pglockLocker) close() { p.db.Close() }
