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

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	waitFor(t, "connection count 0", func() bool { return p.Conns() == 0 })
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
	p.SetDelay(100 * time.Millisecond)
	start := time.Now()
	if err := conn.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("ping took %v, want >= 200ms", el)
	}
	p.SetDelay(0)
	start = time.Now()
	if err := conn.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 100*time.Millisecond {
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
	waitFor(t, "connection count 0", func() bool { return p.Conns() == 0 })
	if err := connect(t, p.DSN(DSN(t))).Ping(ctxT(t)); err != nil {
		t.Fatalf("after reset: %v", err)
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
	errc := make(chan error, 1)
	go func() { errc <- conn.Ping(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	p.Close()
	p.Close()
	if err := <-errc; err == nil {
		t.Fatal("ping succeeded through closed proxy")
	}
	if p.Conns() != 0 {
		t.Fatalf("Conns() = %d after Close", p.Conns())
	}
}
