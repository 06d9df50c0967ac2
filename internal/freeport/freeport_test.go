package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPickNeverCollidesWithAKernelNumberedSocket picks ports while sockets
// numbered by the kernel stay open, as a test's proxies do, and checks that
// no pick is one of theirs, that no pick repeats, and that each pick binds.
func TestPickNeverCollidesWithAKernelNumberedSocket(t *testing.T) {
	kernel := map[int]bool{}
	picked := map[int]bool{}
	for i := 0; i < 200; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		kernel[ln.Addr().(*net.TCPAddr).Port] = true
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if kernel[p] || picked[p] {
			t.Fatalf("pick %d returned port %d, already in use here", i, p)
		}
		picked[p] = true
		if p >= ephemeralLow() {
			t.Fatalf("port %d lies in the ephemeral range", p)
		}
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("picked port %d does not bind: %v", p, err)
		}
		l2.Close()
	}
}
