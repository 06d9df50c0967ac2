package main

// The peers on other servers than PostgreSQL: Redis (redsync,
// bsm/redislock) and etcd.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	_ "github.com/lib/pq" // pglock's own driver
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

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
