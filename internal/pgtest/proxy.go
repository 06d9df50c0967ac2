package pgtest

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy for fault injection between a client and a server.
// All methods are safe for concurrent use.
type Proxy struct {
	t      testing.TB
	target string
	ln     net.Listener

	delay     atomic.Int64 // time.Duration per forwarded chunk
	blackhole atomic.Bool
	mute      atomic.Bool // drop what the server sends
	partition atomic.Bool
	refuse    atomic.Bool

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	closed bool
	sent   []chan struct{} // closed when a client next sends data
	wg     sync.WaitGroup
	once   sync.Once
	done   chan struct{} // closed by Close
}

// proxyConn is one client connection and its upstream connection.
type proxyConn struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the connection is torn down
	// orphan: the client side was reset and the server side is kept open
	// and idle (ResetClients).
	orphan atomic.Bool
}

// NewProxy starts a proxy on 127.0.0.1:0 forwarding to target (host:port).
// It is closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: proxy listen: %v", err)
	}
	p := &Proxy{
		t:      t,
		target: target,
		ln:     ln,
		conns:  make(map[*proxyConn]struct{}),
		done:   make(chan struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DSN rewrites the host and port of base, a postgres:// URL or a
// keyword/value connection string, to point at the proxy.
func (p *Proxy) DSN(base string) string {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			p.t.Fatalf("pgtest: proxy DSN: %v", err)
		}
		u.Host = p.Addr()
		q := u.Query()
		if q.Has("host") || q.Has("hostaddr") || q.Has("port") {
			q.Del("host")
			q.Del("hostaddr")
			q.Del("port")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	var kept []string
	for _, f := range strings.Fields(base) {
		k, _, _ := strings.Cut(f, "=")
		if k != "host" && k != "hostaddr" && k != "port" {
			kept = append(kept, f)
		}
	}
	host, port, _ := net.SplitHostPort(p.Addr())
	return strings.Join(append(kept, "host="+host, "port="+port), " ")
}

// SetDelay delays every forwarded chunk by d (0 disables).
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Blackhole stops (on) or resumes forwarding in both directions without
// closing connections. Data received while blackholed is dropped.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// DropReplies drops (on) or forwards again what the server sends, while
// what clients send still reaches it: a statement runs, and its client
// never hears of it (a reply lost after the commit, until the connection
// is reset).
func (p *Proxy) DropReplies(on bool) { p.mute.Store(on) }

// Partition cuts the network between client and server (on) or heals it:
// like Blackhole, and in addition a connection whose other side closes
// while partitioned is held open, without FIN or RST, until the partition
// heals (it is then closed). Neither side learns anything of the other
// during a partition, as when a cable is cut: a server that restarts or
// ends the session meanwhile is not noticed by the client.
func (p *Proxy) Partition(on bool) {
	p.partition.Store(on)
	p.blackhole.Store(on)
}

// Refuse makes the proxy close new connections immediately (on) or accept
// them again.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// ClientSent returns a channel that is closed the next time a client sends
// data through the proxy, the moment the proxy reads it (before any delay):
// the signal that a statement is on its way to the server.
func (p *Proxy) ClientSent() <-chan struct{} {
	ch := make(chan struct{})
	p.mu.Lock()
	p.sent = append(p.sent, ch)
	p.mu.Unlock()
	return ch
}

func (p *Proxy) clientSent() {
	p.mu.Lock()
	sent := p.sent
	p.sent = nil
	p.mu.Unlock()
	for _, ch := range sent {
		close(ch)
	}
}

// Conns returns the number of active proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// current returns the connections the proxy carries now.
func (p *Proxy) current() []*proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	return cs
}

// ResetAll abruptly closes (RST) all current connections.
func (p *Proxy) ResetAll() {
	for _, c := range p.current() {
		c.reset()
	}
}

// ResetClients abruptly closes (RST) the client side of all current
// connections and keeps their server side open and idle, as a middlebox
// that resets the client's connection only does: the client learns at once
// that its connection failed, the server's backend nothing (its socket
// stays open, and the proxy acknowledges keepalives), so that the backend
// lives on, holding its locks, until it ends of its own accord (terminated,
// say) or the proxy closes. Nothing is forwarded on such a connection any
// more; Conns counts it until its server side closes.
func (p *Proxy) ResetClients() {
	for _, c := range p.current() {
		c.orphan.Store(true)
		resetConn(c.client)
	}
}

// Close stops the proxy, resets all connections and waits for its
// goroutines to exit. It is idempotent.
func (p *Proxy) Close() {
	p.once.Do(func() {
		close(p.done)
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		_ = p.ln.Close()
		p.ResetAll()
		p.wg.Wait()
	})
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond): // transient error
				continue
			}
		}
		if p.refuse.Load() {
			resetConn(c)
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		resetConn(client)
		return
	}
	pc := &proxyConn{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.reset()
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(pc, server, client, true) }()
	go func() { defer wg.Done(); p.pipe(pc, client, server, false) }()
	wg.Wait()
	_ = server.Close() // the server side of an orphan (see ResetClients)

	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pipe copies src to dst, applying delay and blackhole, until either side
// fails; it then closes both connections so the other direction ends too
// (only the client's of an orphan, whose server side it reads and drops
// until that closes: see ResetClients).
func (p *Proxy) pipe(pc *proxyConn, dst, src net.Conn, fromClient bool) {
	defer pc.close()
	defer p.holdWhilePartitioned(pc)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if pc.orphan.Load() {
			if err != nil || fromClient {
				return
			}
			continue
		}
		if n > 0 {
			if fromClient {
				p.clientSent()
			}
			if d := time.Duration(p.delay.Load()); d > 0 {
				timer := time.NewTimer(d)
				select {
				case <-timer.C:
				case <-pc.done:
					timer.Stop()
					return
				}
			}
			if !p.blackhole.Load() && (fromClient || !p.mute.Load()) {
				if _, werr := dst.Write(buf[:n]); werr != nil && !pc.orphan.Load() {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// holdWhilePartitioned delays the teardown of a connection until a
// partition heals, the connection is reset or the proxy closes.
func (p *Proxy) holdWhilePartitioned(pc *proxyConn) {
	for p.partition.Load() {
		select {
		case <-pc.done:
			return
		case <-p.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (pc *proxyConn) close() {
	pc.once.Do(func() {
		close(pc.done)
		_ = pc.client.Close()
		if !pc.orphan.Load() {
			_ = pc.server.Close()
		}
	})
}

// reset resets both sides, the server side of an orphan included.
func (pc *proxyConn) reset() {
	pc.once.Do(func() { close(pc.done) })
	resetConn(pc.client)
	resetConn(pc.server)
}

// resetConn closes c so that the peer sees a RST rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// HostPort returns the host:port of a postgres:// URL, e.g. to use DSN(t)
// as a proxy target.
func HostPort(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("pgtest: cannot take host:port from DSN %q: %v", dsn, err)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "5432")
	}
	return u.Host
}
