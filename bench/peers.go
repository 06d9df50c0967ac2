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
	"strings"
	"sync"
	"time"

	"cirello.io/pglock"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // pglock's own driver
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/pglease/pglease"
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
		if err := c.Migrate(ctx); err != nil {
			c.Close()
			return nil, err
		}
		l := &pgleaseLocker{c: c}
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
	acquire := p.c.TryAcquire
	if block {
		acquire = p.c.Acquire
	}
	l, err := acquire(ctx, name, p.opts...)
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
		if sleepCtx(ctx, r.pollDelay(i)); ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return func(ctx context.Context) error {
		_, err := r.pool.Exec(ctx, `
WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM `+r.table+` WHERE name = $1 AND token = $2 AND (SELECT true FROM async)`, name, token)
		return err
	}, nil
}

func (r *refLocker) close() { r.pool.Close() }

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

// ---- redsync ----

// redsyncLocker uses redsync's defaults (8 s expiry, retries every
// 50–250 ms); a held mutex is extended every expiry/3 by a goroutine of
// ours, since redsync does not extend by itself.
type redsyncLocker struct {
	rc  *redis.Client
	rs  *redsync.Redsync
	ttl time.Duration
}

func openRedsync(ctx context.Context, e *env, o peerOpts) (locker, error) {
	rc := newRedis(max(int(o.conns), 10))
	return &redsyncLocker{rc: rc, rs: redsync.New(redsyncgoredis.NewPool(rc)), ttl: o.ttlOr(8 * time.Second)}, nil
}

func (r *redsyncLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	opts := []redsync.Option{redsync.WithExpiry(r.ttl)}
	var m *redsync.Mutex
	var err error
	if block {
		// Wait until ctx ends, whatever an attempt returns.
		for {
			m = r.rs.NewMutex(name, append(opts, redsync.WithTries(1<<30))...)
			err = m.LockContext(ctx)
			if err == nil || ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	} else {
		m = r.rs.NewMutex(name, opts...)
		err = m.TryLockContext(ctx)
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
			return nil, errBusy
		}
	}
	if err != nil {
		return nil, err
	}
	return keptAlive(r.ttl,
		func(ctx context.Context) error { _, err := m.ExtendContext(ctx); return err },
		func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }), nil
}

func (r *redsyncLocker) close() { r.rc.Close() }

// keptAlive calls refresh every ttl/3 until the returned unlock stops it
// and calls release (the way users of the Redis locks keep a lock).
func keptAlive(ttl time.Duration, refresh, release func(ctx context.Context) error) unlock {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = refresh(ctx)
			}
		}
	}()
	return func(ctx context.Context) error {
		cancel()
		<-done
		return release(ctx)
	}
}

// ---- bsm/redislock ----

// redislockLocker polls every 50 ms while blocked (redislock's
// LinearBackoff; it has no default retry and no default TTL: 30 s here) and
// refreshes a held lock every TTL/3.
type redislockLocker struct {
	rc  *redis.Client
	c   *redislock.Client
	ttl time.Duration
}

const redislockPoll = 50 * time.Millisecond

func openRedislock(ctx context.Context, e *env, o peerOpts) (locker, error) {
	rc := newRedis(max(int(o.conns), 10))
	return &redislockLocker{rc: rc, c: redislock.New(rc), ttl: o.ttlOr(30 * time.Second)}, nil
}

func (r *redislockLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	var opt *redislock.Options
	if block {
		opt = &redislock.Options{RetryStrategy: redislock.LinearBackoff(redislockPoll)}
	}
	var l *redislock.Lock
	var err error
	for {
		l, err = r.c.Obtain(ctx, name, r.ttl, opt)
		// Without a deadline Obtain gives up after one TTL, with its own
		// context's error: start over.
		if !block || ctx.Err() != nil || !(errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded)) {
			break
		}
	}
	if errors.Is(err, redislock.ErrNotObtained) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return keptAlive(r.ttl, func(ctx context.Context) error { return l.Refresh(ctx, r.ttl, nil) }, l.Release), nil
}

func (r *redislockLocker) close() { r.rc.Close() }

// ---- etcd concurrency.Mutex ----

// etcdLocker keeps a free list of sessions: a Mutex is re-entrant within
// its session (a second Lock on the same session returns at once), so each
// concurrent contender needs a session (an etcd lease) of its own;
// sequential use reuses one. With oneConn every lock shares one session
// (distinct names only), as one process holding many locks would.
type etcdLocker struct {
	cli  *clientv3.Client
	ttl  int
	mu   sync.Mutex
	free []*concurrency.Session
	all  []*concurrency.Session
	one  bool
}

func openEtcd(ctx context.Context, e *env, o peerOpts) (locker, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	ttl := int((o.ttlOr(60*time.Second) + time.Second - 1) / time.Second) // whole seconds, rounded up
	return &etcdLocker{cli: cli, ttl: ttl, one: o.oneConn}, nil
}

func (l *etcdLocker) session() (*concurrency.Session, error) {
	l.mu.Lock()
	if n := len(l.free); n > 0 {
		s := l.free[n-1]
		if !l.one {
			l.free = l.free[:n-1]
		}
		l.mu.Unlock()
		return s, nil
	}
	l.mu.Unlock()
	s, err := concurrency.NewSession(l.cli, concurrency.WithTTL(l.ttl))
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.all = append(l.all, s)
	if l.one {
		l.free = append(l.free, s)
	}
	l.mu.Unlock()
	return s, nil
}

func (l *etcdLocker) put(s *concurrency.Session) {
	if l.one {
		return
	}
	l.mu.Lock()
	l.free = append(l.free, s)
	l.mu.Unlock()
}

func (l *etcdLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	s, err := l.session()
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(s, "/locks/"+name)
	if block {
		err = m.Lock(ctx)
	} else {
		err = m.TryLock(ctx)
	}
	if err != nil {
		l.put(s)
		if errors.Is(err, concurrency.ErrLocked) {
			return nil, errBusy
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		defer l.put(s)
		return m.Unlock(ctx)
	}, nil
}

func (l *etcdLocker) close() {
	l.mu.Lock()
	all := l.all
	l.mu.Unlock()
	for _, s := range all {
		s.Close()
	}
	l.cli.Close()
}
