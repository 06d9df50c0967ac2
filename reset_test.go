package pglease

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
)

// A connection that fails on the client's side only (a middlebox reset)
// leaves the server's backend alive, holding the locks of the client's
// old session. In these tests the holder reaches the server through a
// proxy that resets the client's side only, and the waiter, another
// client, polls every hour and waits on a lease of an hour or a minute:
// whatever it gets within the tests' patience, it was woken to get.

// reconnected waits until s runs on a connection other than that of
// epoch, and returns the new epoch.
func reconnected(t *testing.T, s *session, epoch uint64) uint64 {
	t.Helper()
	pgtest.WaitFor(t, patience, "the holder's session to reconnect", func() bool {
		e := s.currentEpoch()
		return e != 0 && e != epoch
	})
	return s.currentEpoch()
}

// The holder's reconnected session takes its client lock again (it ends
// its old session's backend, which held it), and so rings its bell: the
// release hands the name to the first waiter at once, and the plain lease
// held across the reset renews on the new session.
func TestAClientResetOnItsSideOnlyRingsItsBellAgain(t *testing.T) {
	ctx := testCtx(t)
	h, proxy := proxiedClient(t, Config{PollInterval: time.Hour})
	w := testClient(t, Config{Table: h.cfg.Table, PollInterval: time.Hour})
	l, err := h.Acquire(ctx, "reset", WithTTL(time.Hour)) // a wait: the holder has a session, and a bell
	if err != nil {
		t.Fatal(err)
	}
	s := h.conn.sess.Load()
	pgtest.WaitFor(t, patience, "the holder's session to take its client lock", s.isLive)
	epoch := s.currentEpoch()
	got := waitFor(ctx, w, "reset")
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's doorbell", func() bool { return bellArmed(w, h.id) })
	waiterEpoch := w.conn.sess.Load().currentEpoch()

	proxy.ResetClients()
	reconnected(t, s, epoch)
	if !s.isLive() {
		t.Fatal("the holder's reconnected session does not hold its client lock")
	}
	if e := w.conn.sess.Load().currentEpoch(); e != waiterEpoch {
		t.Fatalf("the waiter's session was ended too (epoch %d, was %d)", e, waiterEpoch)
	}
	before := l.Deadline()
	if lost, err := h.renew(ctx, []*Lease{l}); err != nil || len(lost) > 0 {
		t.Fatalf("renewal after the reset: lost %d, %v", len(lost), err)
	}
	if err := causeOf(l.Context()); err != nil || !l.Deadline().After(before) {
		t.Fatalf("the plain lease after the reset: %v, deadline %v (was %v)", err, l.Deadline(), before)
	}

	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nl := receiveLease(t, got, "the waiter to get the name when the holder's release rang")
	t.Logf("release → acquired in %s", time.Since(released))
	_ = nl.Release(ctx)
}

// A fast-failover holder whose session failed on its side ends its lease
// at once (ErrSessionLost); its row stays bound to the old session, which
// the holder's reconnected session ends, so that the waiter takes over at
// once rather than at the TTL.
func TestAFastFailoverHolderResetOnItsSideOnlyIsTakenOverAtOnce(t *testing.T) {
	ctx := testCtx(t)
	h, proxy := proxiedClient(t, Config{PollInterval: time.Hour})
	w := testClient(t, Config{Table: h.cfg.Table, PollInterval: time.Hour})
	l, err := h.TryAcquire(ctx, "ff", ffOpts...)
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(ctx, w, "ff", ffOpts...)
	pgtest.WaitFor(t, patience, "the waiter to watch the holder's doorbell", func() bool { return bellArmed(w, h.id) })

	reset := time.Now()
	proxy.ResetClients()
	pgtest.Receive(t, l.Context().Done(), "the holder to end its lease with its session")
	if err := causeOf(l.Context()); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("the holder's lease ended with %v, want ErrSessionLost", err)
	}
	nl := receiveLease(t, got, "the waiter to take over (the TTL is a minute)")
	t.Logf("reset → taken over in %s", time.Since(reset))
	if nl.Token() <= l.Token() {
		t.Fatalf("token %d after %d", nl.Token(), l.Token())
	}
	_ = nl.Release(ctx)
}

// A client whose role may not end the earlier session that holds its
// client lock (here a superuser's) says what to grant, and its session
// lives on without the lock, as before.
func TestAnEarlierSessionTheRoleMayNotEndIsReported(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	owner := testClient(t, Config{Table: schema + ".leases"})
	if err := owner.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	role := schema + "_app"
	r, s := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	pgtest.Exec(t, `CREATE ROLE `+r+` LOGIN`)
	t.Cleanup(func() { pgtest.Exec(t, `DROP OWNED BY `+r+`; DROP ROLE `+r) })
	pgtest.Exec(t, `GRANT USAGE ON SCHEMA `+s+` TO `+r)
	pgtest.Exec(t, `GRANT SELECT, INSERT, UPDATE, DELETE ON `+s+`.leases, `+s+`.leases_waiters TO `+r)
	pgtest.Exec(t, `GRANT USAGE ON SEQUENCE `+s+`.leases_token_seq TO `+r)
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	records := make(chan slog.Record, 64)
	c, err := Open(ctx, u.String(), Config{Table: schema + ".leases", Logger: slog.New(recordHandler{records})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.ensureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	ns, err := c.st.LockNamespace()
	if err != nil {
		t.Fatal(err)
	}
	// A superuser's backend holds the client's lock, as an earlier session
	// of the client would.
	other, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1::text || $2::text, 1))`, ns, c.id); err != nil {
		t.Fatal(err)
	}

	sess, err := c.session()
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the client's session", sess.connected)
	if sess.isLive() {
		t.Fatal("the session holds the client lock another backend holds")
	}
	for {
		rec := pgtest.Receive(t, records, "the warning that says what to grant")
		if strings.Contains(rec.Message, "pg_signal_backend") {
			break
		}
	}
	if err := other.Ping(ctx); err != nil {
		t.Fatalf("the other backend was ended: %v", err)
	}
}

// A backend that holds the client's lock shared (another client asking,
// in its transaction, whether this client lives: its queued waits, the
// waiters it lists) is not an earlier session of the client, and is
// never ended: the session lives on without the client lock meanwhile,
// as before.
func TestABackendThatAsksWhetherTheClientLivesIsNotEnded(t *testing.T) {
	ctx := testCtx(t)
	records := make(chan slog.Record, 64)
	c := testClient(t, Config{Logger: slog.New(recordHandler{records})})
	if err := c.ensureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	ns, err := c.st.LockNamespace()
	if err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_try_advisory_xact_lock_shared(hashtextextended($1::text || $2::text, 1))`, ns, c.id); err != nil {
		t.Fatal(err)
	}
	sess, err := c.session()
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the client's session", sess.connected)
	for {
		rec := pgtest.Receive(t, records, "the warning that the session waits without queueing")
		if strings.Contains(rec.Message, "waiting without queueing") {
			break
		}
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the backend that held the client's lock shared was ended: %v", err)
	}
}
