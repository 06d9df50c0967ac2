package pgtest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func newProxy(t *testing.T) *Proxy {
	return NewProxy(t, HostPort(t, DSN(t)))
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestProxyForward(t *testing.T) {
	p := newProxy(t)
	conn := connect(t, p.DSN(DSN(t)))
	var port int
	if err := conn.QueryRow(ctxT(t), "SELECT inet_server_port()").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if p.Conns() != 1 {
		t.Fatalf("Conns() = %d, want 1", p.Conns())
	}
	conn.Close(ctxT(t))
	WaitFor(t, Patience, "connection count 0", func() bool { return p.Conns() == 0 })
}

func TestProxyDSN(t *testing.T) {
	p := newProxy(t)
	host, port, _ := net.SplitHostPort(p.Addr())
	got := p.DSN("user=postgres host=db port=1 dbname=x")
	if want := "user=postgres dbname=x host=" + host + " port=" + port; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	got = p.DSN("postgres://u@db:1/x?sslmode=disable&port=7")
	if want := "postgres://u@" + p.Addr() + "/x?sslmode=disable"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestProxyDelay(t *testing.T) {
	p := newProxy(t)
	conn := connect(t, p.DSN(DSN(t)))
	const delay = 500 * time.Millisecond
	p.SetDelay(delay)
	start := time.Now()
	if err := conn.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 2*delay {
		t.Fatalf("ping took %v, want >= %v", el, 2*delay)
	}
	p.SetDelay(0)
	start = time.Now()
	if err := conn.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// Generous: a delayed ping takes at least twice as long.
	if el := time.Since(start); el >= 2*delay {
		t.Fatalf("ping took %v without delay", el)
	}
}

func TestProxyBlackhole(t *testing.T) {
	p := newProxy(t)
	conn := connect(t, p.DSN(DSN(t)))
	p.Blackhole(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := conn.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ping through blackhole: %v, want deadline exceeded", err)
	}
	// New connections hang too.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if c, err := pgx.Connect(ctx2, p.DSN(DSN(t))); err == nil {
		c.Close(context.Background())
		t.Fatal("connect through blackhole succeeded")
	}
	p.Blackhole(false)
	if err := connect(t, p.DSN(DSN(t))).Ping(ctxT(t)); err != nil {
		t.Fatalf("after blackhole: %v", err)
	}
}

// A statement sent while replies are dropped runs and commits on the
// server; its client hears nothing until the connection is reset.
func TestProxyDropReplies(t *testing.T) {
	p := newProxy(t)
	conn := connect(t, p.DSN(DSN(t)))
	table := Schema(t) + ".t"
	Exec(t, "CREATE TABLE "+table+" (x int)")
	p.DropReplies(true)
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), "INSERT INTO "+table+" VALUES (1)")
		errc <- err
	}()
	WaitFor(t, Patience, "the insert to commit", func() bool {
		return Value[int](t, "SELECT count(*)::int FROM "+table) == 1
	})
	p.DropReplies(false)
	p.ResetAll()
	if err := Receive(t, errc, "the insert's error"); err == nil {
		t.Fatal("the insert succeeded: its reply was not dropped")
	}
}

func TestProxyResetAll(t *testing.T) {
	p := newProxy(t)
	conns := []*pgx.Conn{connect(t, p.DSN(DSN(t))), connect(t, p.DSN(DSN(t)))}
	if p.Conns() != 2 {
		t.Fatalf("Conns() = %d, want 2", p.Conns())
	}
	p.ResetAll()
	for _, c := range conns {
		if err := c.Ping(ctxT(t)); err == nil {
			t.Fatal("ping succeeded after ResetAll")
		}
	}
	WaitFor(t, Patience, "connection count 0", func() bool { return p.Conns() == 0 })
	if err := connect(t, p.DSN(DSN(t))).Ping(ctxT(t)); err != nil {
		t.Fatalf("after reset: %v", err)
	}
}

func TestProxyClientSent(t *testing.T) {
	p := newProxy(t)
	conn := connect(t, p.DSN(DSN(t)))
	sent := p.ClientSent()
	select {
	case <-sent:
		t.Fatal("ClientSent closed before the client sent anything")
	default:
	}
	p.SetDelay(time.Hour)
	errc := make(chan error, 1)
	go func() { errc <- conn.Ping(context.Background()) }()
	// Closed on the read, not after the delay.
	Receive(t, sent, "the ping to reach the proxy")
	select {
	case err := <-errc:
		t.Fatalf("the ping went through an hour's delay: %v", err)
	default:
	}
	p.Close()
	if err := <-errc; err == nil {
		t.Fatal("ping succeeded through a closed proxy")
	}
}

func TestProxyRefuse(t *testing.T) {
	p := newProxy(t)
	p.Refuse(true)
	if c, err := pgx.Connect(ctxT(t), p.DSN(DSN(t))); err == nil {
		c.Close(context.Background())
		t.Fatal("connect succeeded while refusing")
	}
	p.Refuse(false)
	if err := connect(t, p.DSN(DSN(t))).Ping(ctxT(t)); err != nil {
		t.Fatalf("after refuse: %v", err)
	}
}

func TestProxyCloseWithActiveConns(t *testing.T) {
	p := newProxy(t)
	conn := connect(t, p.DSN(DSN(t)))
	p.SetDelay(time.Hour) // a goroutine is parked in the delay
	sent := p.ClientSent()
	errc := make(chan error, 1)
	go func() { errc <- conn.Ping(context.Background()) }()
	Receive(t, sent, "the ping to reach the proxy")
	p.Close()
	p.Close()
	if err := <-errc; err == nil {
		t.Fatal("ping succeeded through closed proxy")
	}
	if p.Conns() != 0 {
		t.Fatalf("Conns() = %d after Close", p.Conns())
	}
}

func TestProxyResetClients(t *testing.T) {
	p := newProxy(t)
	conn := connect(t, p.DSN(DSN(t)))
	var pid int
	if err := conn.QueryRow(ctxT(t), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	p.ResetClients()
	if err := conn.Ping(ctxT(t)); err == nil {
		t.Fatal("ping succeeded after ResetClients")
	}
	// The backend lives on, idle, until it is ended.
	if !Value[bool](t, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state = 'idle')`, pid) {
		t.Fatal("the backend ended with its client's side")
	}
	// The orphan; and for a moment, the cancel request pgx sends on a
	// connection of its own when one fails (pgconn's asyncClose).
	WaitFor(t, Patience, "the proxy to count the orphan alone", func() bool { return p.Conns() == 1 })
	if !Value[bool](t, `SELECT pg_terminate_backend($1)`, pid) {
		t.Fatal("could not end the backend")
	}
	WaitFor(t, Patience, "connection count 0", func() bool { return p.Conns() == 0 })
	if err := connect(t, p.DSN(DSN(t))).Ping(ctxT(t)); err != nil {
		t.Fatalf("after ResetClients: %v", err)
	}
}
