package pglease

// Opening connections of the client's own: the dedicated session's, and a
// watcher's (doorbell.go, failover.go).

import (
	"context"
	"database/sql"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/store"
)

// connection is the part of a Client that owns its connections beyond
// the pool (Client.db): the pool to close when Open made it, the
// database/sql handle of NewFromDB, the dedicated session and the
// settings its connections (and the watchers') are opened with.
type connection struct {
	ownPool *pgxpool.Pool // closed by Close when Open created it
	sqlDB   *sql.DB       // set by NewFromDB
	// sess is the dedicated session, created on first use by
	// Client.session (under mu), then never changed: read without a lock.
	sess atomic.Pointer[session]

	mu  sync.Mutex
	cfg *pgx.ConnConfig // the dedicated connection's settings; learnt from sqlDB's driver when not given
}

// connect opens the dedicated connection (which listens for notifications
// only on demand: see listen.go). proxied reports a connection whose server
// backend other clients share (a transaction-pooling proxy): it cannot
// hold session-bound leases. live reports one that holds the client lock
// and bell 0: the client's waits may queue, and its releases ring.
func (s *session) connect() (_ dconn, proxied, live bool, _ error) {
	c := s.c
	if hook := testHookConnect.Load(); hook != nil {
		(*hook)(c.id)
	}
	ctx, cancel := context.WithTimeout(c.life.bg, c.connectBudget())
	defer cancel()
	cfg, err := c.dedicatedConfig(ctx)
	if err != nil {
		return nil, false, false, err
	}
	if cfg == nil { // database/sql with a driver other than pgx
		sc, err := c.conn.sqlDB.Conn(ctx)
		if err != nil {
			return nil, false, false, err
		}
		return &sqlConn{c: sc}, false, false, nil
	}
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &sessionWatch{conn: pc.Conn(), overdue: s.overdue}
	}
	pc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, false, false, err
	}
	// A transaction-pooling proxy (PgBouncer, and others) answers the
	// startup with a backend key of its own and runs each transaction on
	// any server backend: the session is not ours, so neither are its
	// advisory locks, and session settings would leak to other clients.
	var pid uint32
	if err := pc.QueryRow(ctx, c.st.Q.BackendPID, pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		_ = pc.Close(ctx)
		return nil, false, false, err
	}
	if pid != pc.PgConn().PID() {
		proxied = true
	} else if err := c.st.SessionSettings(ctx, store.Pgx(pc), c.cfg.StatementTimeout, sessionLockTimeout); err != nil {
		_ = pc.Close(ctx)
		return nil, false, false, err
	}
	if !proxied {
		if live, err = s.clientLock(ctx, pc); err != nil {
			_ = pc.Close(ctx)
			return nil, false, false, err
		}
	}
	return pgxConn{pc}, proxied, live, nil
}

// dropPoolConns closes the connections of the pool that Open created, the
// idle ones now and the busy ones as they return, once the dedicated
// session runs the client's statements: they served its start (Open's
// check, the first statements while the session connected), and would
// otherwise stay open until idle for poolIdleTime, a second connection per
// client in a fleet that starts at once. A pool the caller owns is left
// alone.
func (cn *connection) dropPoolConns() {
	if cn.ownPool != nil {
		cn.ownPool.Reset()
	}
}

// testHookConnect, when set by a test, runs as a dedicated session begins
// to connect, with its client's id.
var testHookConnect atomic.Pointer[func(client string)]

// clientLock takes the session lock and the client lock on a new dedicated
// connection (see SessionLock and ClientLock in session.sql). It reports
// false, without an error, when the client lock cannot be had now or the
// table was not checked yet: the client then waits without queueing until
// the next connection. Its session-bound leases fail over at once all the
// same: waiters watch the session lock, which a new session always gets.
//
// A client lock held by another backend is held by an earlier session of
// this client that the server has not ended: its connection failed on
// this side only (a middlebox reset), and the server's backend may live on
// for hours. That backend holds the bell that this client's waiters watch,
// and the session lock that binds the session-bound rows it acquired,
// whose leases this client ended when the connection failed. So it is
// ended (endEarlierSession), and the client lock taken.
func (s *session) clientLock(ctx context.Context, pc *pgx.Conn) (bool, error) {
	c := s.c
	if err := c.ensureSchema(ctx); err != nil {
		return false, nil
	}
	q := store.Pgx(pc)
	err := c.st.ClientLock(ctx, q, c.id)
	for try := 0; try < endEarlierTries && store.Classify(err) == store.KindLockTimeout; try++ {
		if !s.endEarlierSession(ctx, q) {
			return false, nil
		}
		err = c.st.ClientLock(ctx, q, c.id)
	}
	if store.Classify(err) == store.KindLockTimeout {
		c.cfg.Logger.WarnContext(ctx, "pglease: an earlier session of this client still holds its client lock; waiting without queueing until the next connection")
		return false, nil
	}
	return err == nil, err
}

// endEarlierTries bounds the times a new dedicated session ends an
// earlier session of its client that holds its client lock, and waits
// for the lock (each wait is bounded by sessionLockTimeout).
const endEarlierTries = 3

// endEarlierSession ends the backends of this client's earlier sessions
// that hold its client lock (see EndEarlierSession in session.sql), and
// reports false when it could not (the role may not end them), having
// logged what to grant.
func (s *session) endEarlierSession(ctx context.Context, q store.Querier) bool {
	c := s.c
	pids, err := c.st.EndEarlierSession(ctx, q, c.id)
	switch {
	case store.Classify(err) == store.KindPrivilege:
		c.cfg.Logger.WarnContext(ctx, "pglease: an earlier session of this client, kept by the server after its connection failed on this side, still holds its client lock, and this role may not end it;"+
			" until the server ends it (TCP keepalive, by default after about two hours), waiters of this client's leases are woken only by their fallback poll or expiry timer,"+
			" and its fast-failover leases are taken over only at their expiry. Connect with the role of that session, or grant this role pg_signal_backend"+
			" (which lets it cancel and end the sessions of every role but superusers)", "err", err)
		return false
	case err != nil:
		c.cfg.Logger.WarnContext(ctx, "pglease: could not end an earlier session of this client that holds its client lock", "err", err)
		return false
	case len(pids) > 0:
		c.cfg.Logger.InfoContext(ctx, "pglease: ended an earlier session of this client that the server kept after its connection failed on this side", "pids", pids)
	}
	return true
}

func (c *Client) connectTimeout() time.Duration {
	if c.conn.cfg != nil && c.conn.cfg.ConnectTimeout > 0 {
		return c.conn.cfg.ConnectTimeout
	}
	if c.cfg.ConnectTimeout > 0 {
		return c.cfg.ConnectTimeout
	}
	return defaultConnTimeout
}

// connectBudget bounds one connection, which may try every host of a
// multi-host DSN in turn: pgx gives each host the connect timeout of its
// own, so the whole attempt may take that many timeouts. A bound of one
// timeout would let a silent host listed first (a partitioned old primary
// that accepts TCP but never answers) use it all up, and the host that is
// now the primary would never be tried.
func (c *Client) connectBudget() time.Duration {
	c.conn.mu.Lock()
	cfg := c.conn.cfg
	c.conn.mu.Unlock()
	return c.connectTimeout() * time.Duration(hostCount(cfg))
}

// hostCount is the number of distinct hosts pgx tries to connect to cfg
// (1 for nil).
func hostCount(cfg *pgx.ConnConfig) int {
	if cfg == nil {
		return 1
	}
	hosts := map[string]bool{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))): true}
	for _, f := range cfg.Fallbacks {
		hosts[net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port)))] = true
	}
	return len(hosts)
}

// dedicatedConfig returns the pgx settings of the dedicated connection, or
// nil when the client wraps a database/sql handle of another driver.
func (c *Client) dedicatedConfig(ctx context.Context) (*pgx.ConnConfig, error) {
	c.conn.mu.Lock()
	cfg := c.conn.cfg
	c.conn.mu.Unlock()
	if cfg != nil || c.conn.sqlDB == nil {
		return c.namedConfig(cfg), nil
	}
	conn, err := c.conn.sqlDB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		if p, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
			cfg = p.Conn().Config().Copy()
		}
		return nil
	})
	if err != nil || cfg == nil {
		return nil, err
	}
	c.conn.mu.Lock()
	c.conn.cfg = cfg
	c.conn.mu.Unlock()
	return c.namedConfig(cfg), nil
}

// namedConfig returns a copy of cfg whose application_name names pglease and
// the owner, so operators find the connection in pg_stat_activity.
func (c *Client) namedConfig(cfg *pgx.ConnConfig) *pgx.ConnConfig {
	if cfg == nil {
		return nil
	}
	cfg = cfg.Copy()
	// A config copied from a live connection still routes notifications to
	// that connection's buffer; let pgx install this connection's own.
	cfg.OnNotification = nil
	cfg.RuntimeParams["application_name"] = appName(c.cfg.Owner)
	return cfg
}

// connectPgx opens a plain pgx connection used for one purpose.
func connectPgx(ctx context.Context, cfg *pgx.ConnConfig, timeout time.Duration) (pgxConn, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pc, err := pgx.ConnectConfig(cctx, cfg)
	return pgxConn{pc}, err
}
