// Package freeport picks TCP ports for the servers the tests start
// (PostgreSQL, Patroni's REST API, etcd, PgBouncer).
//
// The usual trick, listening on port 0 and closing, hands back a port from
// the kernel's ephemeral range. Until the server binds it, any socket the
// kernel numbers — a test proxy listening on port 0, an outgoing
// connection — may be given the same port, and the server then fails with
// "address already in use" (a Patroni node whose REST API port went to a
// proxy the same test had started a moment later). Ports picked here lie
// below the ephemeral range, where the kernel never numbers a socket by
// itself, and are never handed out twice in one process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// low is the lowest port picked: above the registered services most
// machines run.
const low = 20000

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Pick returns a port on 127.0.0.1 that is free now, lies outside the
// kernel's ephemeral range, and has not been returned before by this
// process.
func Pick() (int, error) {
	high := ephemeralLow() - 1
	if high-low < 1000 {
		return 0, fmt.Errorf("freeport: the ephemeral range starts at %d, leaving too few ports below it; raise net.ipv4.ip_local_port_range", high+1)
	}
	mu.Lock()
	defer mu.Unlock()
	for try := 0; try < 1000; try++ {
		p := low + rand.IntN(high-low+1)
		if given[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free port between %d and %d after 1000 tries", low, high)
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}
