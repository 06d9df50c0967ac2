package pglease

// Where a watcher waits: a waiting client's watchers (of a holder's bell,
// doorbell.go; of a holder's session, failover.go) block on the server,
// each statement at most watchTimeout. One of them at a time waits on the
// client's dedicated session, while that is otherwise idle (the session's
// watch slot: session.watch), so that a client that waits on one holder
// keeps one connection; the others, or one that finds the session busy
// listening for notifications, wait on a connection of their own.

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/store"
)

// watchLine is one watcher's way to the server: the dedicated session's
// watch slot, or, once that could not be had, a connection of its own,
// kept until the watcher stops (close).
type watchLine struct {
	c   *Client
	own *pgxConn
}

// query runs a statement that does not block (a bell's probe): on the
// line's own connection, or else as one of the client's statements (on the
// session or the pool: Client.exec).
func (l *watchLine) query(ctx context.Context, fn func(ctx context.Context, q store.Querier) error) error {
	if l.own != nil {
		return fn(ctx, l.own.querier())
	}
	return l.c.exec(ctx, func(ctx context.Context, q store.DB, _ *sessState) error { return fn(ctx, q) })
}

// await runs a blocking statement (each waits at most watchTimeout, then
// fails with a lock timeout): in the session's watch slot when the line
// can have it, else on its own connection, opened now if need be. On the
// session it fails with errInterrupted when the session's other work
// interrupted it: the watcher waits again, as after a lock timeout.
//
// slot, a context within ctx, ends a wait in the session's watch slot
// early (its watcher has no wait left): await then returns slot's error.
// A wait on the line's own connection runs on: cancelling its statement
// would close the connection.
func (l *watchLine) await(ctx, slot context.Context, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	if l.own != nil {
		if s := l.c.conn.sess.Load(); s != nil && s.slotFree() {
			// The slot freed (the line that held it let go, the client
			// listens no more): back to the session, which a waiting
			// client's one watcher shares, rather than keep a connection
			// of its own for as long as it watches.
			l.own.close()
			l.own = nil
		}
	}
	if l.own == nil {
		if s := l.c.conn.sess.Load(); s != nil {
			err := s.watch(slot, l, l.c.wake.watchMax()+l.c.cfg.StatementTimeout, fn)
			if !errors.Is(err, errNoSlot) && (err == nil || store.FromServer(err) || errors.Is(err, errInterrupted) || slot.Err() != nil) {
				return err
			}
			// No slot, or the session failed under it: a connection of
			// its own from now on.
			s.unslot(l)
		}
		conn, err := l.c.ownWatchConn(ctx)
		if err != nil {
			return err
		}
		l.own = conn
	}
	return fn(ctx, l.own.c)
}

// idle lets go of the session's watch slot while the watcher has no wait
// to watch for, so that another watcher may have it.
func (l *watchLine) idle() {
	if s := l.c.conn.sess.Load(); s != nil {
		s.unslot(l)
	}
}

// close lets go of the session's watch slot and closes the line's own
// connection.
func (l *watchLine) close() {
	if s := l.c.conn.sess.Load(); s != nil {
		s.unslot(l)
	}
	if l.own != nil {
		l.own.close()
		l.own = nil
	}
}

// ownWatchConn opens a connection of a watcher's own.
func (c *Client) ownWatchConn(ctx context.Context) (*pgxConn, error) {
	cfg, err := c.dedicatedConfig(ctx)
	if err != nil {
		return nil, err
	}
	if cfg == nil { // not reached: a client without sessions has no watchers
		return nil, ErrSessionUnavailable
	}
	return c.dialWatch(ctx, cfg)
}
