package pglease

// Listening on demand: the dedicated session listens for notifications
// only while the client needs them, since the server signals every
// listening backend of the database at every NOTIFY, whatever its channel
// (see "Listening on demand" in docs/DESIGN-WAITING.md). A client needs
// them while it holds a lease whose holder listens for step-down requests
// (Lease.StepDownRequested, which an Elector calls) or has a wait or an
// observer that does not watch a doorbell; it stops listenLinger after the
// last need.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/store"
)

// listenLinger is how long the session keeps listening after the client
// last needed notifications (wakeups.listenLinger, which tests shorten): a
// client that holds leases on and off, or waits often, does not LISTEN and
// UNLISTEN at every turn.
const listenLinger = 30 * time.Second

// needNotifications counts a wait or an observer of the client among
// those that listen for notifications, when the client has a dedicated
// session (a wait starts it), until done is called. The first one makes the
// session listen (it wakes every wait once it does, as a reconnect does: a
// notification sent before may have been missed).
func (c *Client) needNotifications() (done func()) {
	s := c.conn.sess.Load()
	if s == nil { // no session, no notifications: the caller polls
		return func() {}
	}
	s.need(+1)
	return func() { s.need(-1) }
}

func (s *session) need(delta int) {
	s.mu.Lock()
	s.listeners += delta
	s.wanted = time.Now()
	start := delta > 0 && !s.listening
	if start && s.stop != nil {
		s.stop()
	}
	s.mu.Unlock()
	if start {
		wake(s.kick)
	}
}

// isListening reports whether the session listens for notifications.
func (s *session) isListening() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listening
}

// connected reports whether the session has a connection.
func (s *session) connected() bool { return s.currentEpoch() != 0 }

// poke makes an idle session look again whether it should listen (a
// holder asked to hear step-down requests).
func (s *session) poke() {
	s.mu.Lock()
	if !s.listening && s.stop != nil {
		s.stop()
	}
	s.mu.Unlock()
}

// listenChange says whether the session must start (+1) or stop (-1)
// listening, and how long it may wait for notifications before it looks
// again (0: as long as it likes). s.mu is held. A session behind a
// transaction-pooling proxy never listens: its LISTEN would stay on
// whichever server backend ran it, which other clients share, so that the
// notifications would reach them (and that backend would be signalled at
// every NOTIFY of the database for as long as the proxy keeps it); its
// client's waits poll, as with Config.DisableNotify.
func (s *session) listenChange(stepDowns bool) (int, time.Duration) {
	c := s.c
	if c.cfg.DisableNotify || s.epoch == 0 || s.proxied {
		return 0, 0
	}
	now := time.Now()
	if stepDowns || s.listeners > 0 {
		s.wanted = now
		if !s.listening {
			return +1, 0
		}
		if stepDowns && s.listeners == 0 {
			return 0, c.wake.listenLinger // to look again once such leases end
		}
		return 0, 0
	}
	if !s.listening {
		return 0, 0
	}
	if left := s.wanted.Add(c.wake.listenLinger).Sub(now); left > 0 {
		return 0, left
	}
	return -1, 0
}

// listen makes the connection listen on the table's channel, the client's
// own and its step-down channel (start), or on none. Having started, it
// wakes every wait and looks for step-down requests sent before.
func (s *session) listen(conn dconn, start bool) error {
	c := s.c
	pc, ok := conn.(pgxConn)
	if !ok { // database/sql with another driver: no notifications
		s.mu.Lock()
		s.listening = start
		s.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithTimeout(c.life.bg, c.cfg.StatementTimeout)
	defer cancel()
	stmts := []string{"UNLISTEN *"}
	if start {
		stmts = []string{c.st.Q.Listen, store.ListenSQL(store.ClientChannel(c.id)), store.ListenSQL(c.stepDownChannel())}
	}
	for _, stmt := range stmts {
		if _, err := pc.c.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.listening = start
	s.mu.Unlock()
	if start {
		c.wake.hub.notifyAll()
		c.pendingStepDowns(conn.querier())
	}
	return nil
}
