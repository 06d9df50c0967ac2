package pglease

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// silentHost listens on loopback and accepts connections that it never
// answers, as a partitioned server does whose network still completes the
// TCP handshake (a proxy, a load balancer). It returns its address.
func silentHost(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 64)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A multi-host DSN whose first host is silent: every connection, the
// pool's and the dedicated session's, is given the connect timeout per
// host, so the client still reaches the second host. Before, one timeout
// bounded the whole attempt: the silent host used it up, Open failed and a
// fast-failover lease (which needs the dedicated session) could never be
// had while the first host stayed silent.
func TestSilentFirstHostOfAMultiHostDSN(t *testing.T) {
	dsn := pgtest.DSN(t)
	real := pgtest.HostPort(t, dsn)
	multi := strings.Replace(dsn, real, silentHost(t)+","+real, 1)
	if strings.Contains(multi, "?") {
		multi += "&connect_timeout=1"
	} else {
		multi += "?connect_timeout=1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	c, err := Open(ctx, multi, Config{Table: pgtest.Schema(t) + ".leases"})
	if err != nil {
		t.Fatalf("Open with a silent first host: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, "multi", WithTTL(time.Minute), WithFastFailover())
	if err != nil {
		t.Fatalf("fast-failover Acquire with a silent first host: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
