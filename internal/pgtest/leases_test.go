package pgtest

import (
	"context"
	"testing"
	"time"
)

// leaseTable creates a table of the lease table's layout in a fresh schema.
func leaseTable(t *testing.T) *Leases {
	schema := Schema(t)
	Exec(t, `CREATE TABLE `+schema+`.leases (
		"name" text PRIMARY KEY, "owner" text NOT NULL, "token" bigint NOT NULL,
		"acquired_at" timestamptz NOT NULL, "renewed_at" timestamptz NOT NULL,
		"expires_at" timestamptz NOT NULL, "hold_until" timestamptz NOT NULL,
		"ttl" interval NOT NULL, "session_pid" integer,
		"metadata" jsonb NOT NULL DEFAULT '{}', "session_server" text)`)
	return LeaseTable(t, DSN(t), schema+".leases")
}

func TestLeasesReadAndWriteRows(t *testing.T) {
	l := leaseTable(t)
	if n := l.Count(); n != 0 {
		t.Fatalf("Count of an empty table = %d", n)
	}
	if _, ok := l.Get("a"); ok {
		t.Fatal("Get found a row in an empty table")
	}
	l.Insert("a", "me", 7, time.Minute, `{"client": "x"}`)
	l.Insert("b", "you", 9, time.Minute, "")
	r, ok := l.Get("a")
	if !ok || r.Owner != "me" || r.Token != 7 || !r.Held || r.Metadata != `{"client": "x"}` {
		t.Fatalf("Get = %+v, %v", r, ok)
	}
	if n, max := l.Count(), l.MaxToken(); n != 2 || max != 9 {
		t.Fatalf("Count %d, MaxToken %d; want 2, 9", n, max)
	}
	l.SetExpiry("b", -time.Second)
	if held := l.Held(""); len(held) != 1 || held[0] != "a" {
		t.Fatalf("Held = %v after b expired", held)
	}
	if at := l.ExpiresAt("b"); !at.Before(time.Now()) {
		t.Fatalf("ExpiresAt(b) = %v, want in the past", at)
	}
	l.SetHeartbeatAge("a", time.Hour)
	if r, _ := l.Get("a"); time.Since(r.RenewedAt) < 59*time.Minute {
		t.Fatalf("heartbeat %v ago, want an hour", time.Since(r.RenewedAt))
	}
}

func TestLeasesLockRowBlocksWriters(t *testing.T) {
	l := leaseTable(t)
	l.Insert("a", "me", 1, time.Minute, "")
	unlock := l.LockRow("a")
	conn := Conn(t)
	if _, err := conn.Exec(ctxT(t), "SET application_name = 'pgtest_blocked_writer'"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), `DELETE FROM `+l.Name()+` WHERE "name" = 'a'`)
		done <- err
	}()
	WaitLockWait(t, "pgtest_blocked_writer")
	select {
	case err := <-done:
		t.Fatalf("a write to the locked row went through: %v", err)
	default:
	}
	unlock()
	if err := Receive(t, done, "the write after unlock"); err != nil {
		t.Fatal(err)
	}
	if n := l.Count(); n != 0 {
		t.Fatalf("%d rows after the delete", n)
	}
}

func TestWaitListeningSeesAnIdleListener(t *testing.T) {
	conn := Conn(t)
	ctx := ctxT(t)
	if _, err := conn.Exec(ctx, "SET application_name = 'pgtest_listener'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `LISTEN "some_channel"`); err != nil {
		t.Fatal(err)
	}
	WaitListening(t, "pgtest_listener")
	// Another statement on the connection: it no longer waits.
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if Value[bool](t, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE application_name = 'pgtest_listener' AND query ILIKE 'LISTEN %')`) {
		t.Fatal("a backend whose last statement is not LISTEN counts as listening")
	}
}
