package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/cmd/pglease/internal/console"
	"github.com/pglease/pglease/internal/pgtest"
)

// send sends req with its Host header set to host ("" keeps the URL's)
// and returns the status, the headers and the body; a stream that answered
// 200 is closed unread.
func (f *fixture) send(req *http.Request, host string) (*http.Response, string) {
	f.t.Helper()
	if host != "" {
		req.Host = host
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s (Host %s): %v", req.Method, req.URL, host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp, ""
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s (Host %s): reading the body: %v", req.Method, req.URL, host, err)
	}
	return resp, string(b)
}

// port is the port of the fixture's server.
func (f *fixture) port() string {
	u, _ := url.Parse(f.srv.URL)
	return u.Port()
}

// holdVictim takes lease "victim" for a minute on the console's table
// and returns the table, to check that the lease is still there.
func holdVictim(t *testing.T, f *fixture) *pgtest.Leases {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	if _, err := f.client().TryAcquire(ctx, "victim", pglease.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	return pgtest.LeaseTable(t, pgtest.DSN(t), f.table)
}

// A DNS-rebinding page: attacker.example resolves to 127.0.0.1 once its
// page has loaded, so the browser sends the console the page's requests
// as same-origin ones, with Host (and Origin) attacker.example:PORT.
// Without a token the console answers none of them: not the page and its
// form token, not the event stream or the metrics (names, owners, hosts),
// not /healthz, and not a release that carries a valid form token.
func TestRebindingHostIsRefusedOnEveryPath(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{AllowRelease: true})
	leases := holdVictim(t, f)
	csrf := f.csrf() // as the console's own page has it
	evil := "attacker.example:" + f.port()

	for _, p := range paths {
		resp, body := f.send(f.request(http.MethodGet, p, ""), evil)
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("GET %s with Host %s: %s, want 421", p, evil, resp.Status)
		}
		checkHeaders(t, "GET "+p+" (Host "+evil+")", resp.Header)
		for _, s := range []string{"victim", csrf, "tester"} {
			if strings.Contains(body, s) {
				t.Errorf("GET %s with Host %s: the response shows %q", p, evil, s)
			}
		}
	}
	_, body := f.send(f.request(http.MethodGet, "/", ""), evil)
	for _, s := range []string{"421", `"attacker.example:` + f.port() + `"`, "http://127.0.0.1:" + f.port() + "/", "--allow-host", "--token-file"} {
		if !strings.Contains(body, s) {
			t.Errorf("the refusal does not say %q:\n%s", s, body)
		}
	}

	release := url.Values{"csrf": {csrf}, "name": {"victim"}, "confirm": {"yes"}}.Encode()
	resp, body := f.send(f.request(http.MethodPost, "/release", release,
		"Origin", "http://"+evil, "Sec-Fetch-Site", "same-origin", "Accept", "application/json"), evil)
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("POST /release from the rebinding page: %s, want 421: %s", resp.Status, body)
	}
	if _, ok := leases.Get("victim"); !ok {
		t.Fatal("the rebinding page released victim")
	}
}

// Only a loopback address or localhost, on any port, addresses the console
// when it has no token; every other name is refused, however close.
func TestHostMustBeLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{})
	for _, host := range []string{"127.0.0.1:" + f.port(), "127.0.0.1", "127.8.9.10:80", "localhost", "LocalHost:" + f.port(),
		"[::1]", "[::1]:" + f.port(), "[::ffff:127.0.0.1]:80"} {
		if resp, body := f.send(f.request(http.MethodGet, "/healthz", ""), host); resp.StatusCode != http.StatusOK {
			t.Errorf("GET /healthz with Host %s: %s, want 200: %s", host, resp.Status, body)
		}
	}
	for _, host := range []string{"attacker.example", "localhost.attacker.example:80", "127.0.0.1.attacker.example", "localhost.",
		"0.0.0.0:" + f.port(), "[::]:80", "192.168.1.20", "10.0.0.1:" + f.port(), "[fe80::1%25lo]:80", "[::2]:80", "127.0.0.1.", "0x7f000001"} {
		if resp, body := f.send(f.request(http.MethodGet, "/healthz", ""), host); resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("GET /healthz with Host %s: %s, want 421: %s", host, resp.Status, body)
		}
	}
}

// A state-changing request whose Origin names another host is refused,
// even when it is addressed to the console and claims to be same-origin:
// the Origin is checked against the same hosts as Host.
func TestReleaseFromAnotherOriginIsRefused(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{AllowRelease: true})
	leases := holdVictim(t, f)
	release := url.Values{"csrf": {f.csrf()}, "name": {"victim"}, "confirm": {"yes"}}.Encode()
	for _, origin := range []string{"http://attacker.example:" + f.port(), "null", "http://127.0.0.1.attacker.example:" + f.port(), "file://"} {
		resp, body := f.send(f.request(http.MethodPost, "/release", release, "Origin", origin, "Sec-Fetch-Site", "same-origin"), "")
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST /release with Origin %s: %s, want 403: %s", origin, resp.Status, body)
		}
		if _, ok := leases.Get("victim"); !ok {
			t.Fatalf("POST /release with Origin %s released victim", origin)
		}
	}
	// From the console's own page, by any loopback name: released.
	resp, body := f.send(f.request(http.MethodPost, "/release", release, "Origin", "http://localhost:"+f.port(),
		"Sec-Fetch-Site", "same-origin"), "localhost:"+f.port())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /release from the console's page at localhost: %s: %s", resp.Status, body)
	}
	if _, ok := leases.Get("victim"); ok {
		t.Fatal("victim is still there")
	}
}

// AllowHosts adds names the console answers to (case aside, any port),
// for a console reached through a proxy or a name of its own; loopback
// still works, and other names are still refused.
func TestAllowHostsAddNames(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{AllowHosts: []string{"Console.Internal", "fd00::5", "[fd00::6]", "192.168.1.20"}})
	for _, host := range []string{"console.internal:8080", "CONSOLE.INTERNAL", "[fd00::5]:80", "[fd00:0::6]", "192.168.1.20:" + f.port(), "127.0.0.1", "localhost"} {
		if resp, body := f.send(f.request(http.MethodGet, "/", ""), host); resp.StatusCode != http.StatusOK {
			t.Errorf("GET / with Host %s: %s, want 200: %s", host, resp.Status, body)
		}
	}
	for _, host := range []string{"attacker.example", "console.internal.attacker.example", "internal", "192.168.1.21"} {
		resp, body := f.send(f.request(http.MethodGet, "/", ""), host)
		if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(body, "Console.Internal, fd00::5") {
			t.Errorf("GET / with Host %s: %s, want 421 naming the allowed hosts: %s", host, resp.Status, body)
		}
	}
}

// With a token, the token keeps others out: a request that carries it is
// answered whatever Host it names (a console behind a proxy, by a pod's
// address), unless AllowHosts names hosts, which then restrict it too.
func TestTokenRequestsMayNameAnyHostUnlessAllowHostsIsSet(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef-secret"
	bearer := []string{"Authorization", "Bearer " + token}
	open := start(t, console.Config{Token: token})
	for _, host := range []string{"attacker.example", "10.1.2.3:8080", "127.0.0.1"} {
		if resp, body := open.send(open.request(http.MethodGet, "/healthz", "", bearer...), host); resp.StatusCode != http.StatusOK {
			t.Errorf("token, GET /healthz with Host %s and the token: %s, want 200: %s", host, resp.Status, body)
		}
		if resp, _ := open.send(open.request(http.MethodGet, "/healthz", ""), host); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token, GET /healthz with Host %s without the token: %s, want 401", host, resp.Status)
		}
	}
	strict := start(t, console.Config{Token: token, AllowHosts: []string{"console.internal"}})
	for host, want := range map[string]int{"console.internal": 200, "127.0.0.1": 200, "attacker.example": 421, "10.1.2.3:8080": 421} {
		if resp, body := strict.send(strict.request(http.MethodGet, "/healthz", "", bearer...), host); resp.StatusCode != want {
			t.Errorf("token and AllowHosts, GET /healthz with Host %s and the token: %s, want %d: %s", host, resp.Status, want, body)
		}
	}
}

func TestCheckAllowHost(t *testing.T) {
	for _, name := range []string{"console.internal", "Console-1.example.com", "localhost", "my_host", "192.168.1.20", "fd00::5", "[fd00::5]", "a"} {
		if err := console.CheckAllowHost(name); err != nil {
			t.Errorf("CheckAllowHost(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "*.example.com", "http://console.internal", "console.internal:8080", "a..b", ".a", "a.", "-a.b",
		"a b", "[fe80::1%eth0]", "fe80::1%eth0", strings.Repeat("a", 64) + ".b", "127.0.0.1:80", "[console]"} {
		err := console.CheckAllowHost(name)
		if err == nil || !strings.Contains(err.Error(), "without scheme, port or wildcard") {
			t.Errorf("CheckAllowHost(%q) = %v, want an error that says what to give", name, err)
		}
	}
	if _, err := console.Open(context.Background(), console.Config{AllowHosts: []string{"*.example"}, DSN: "host=/nonexistent"}); err == nil ||
		!strings.Contains(err.Error(), "AllowHosts") {
		t.Errorf("Open with a bad AllowHosts: %v, want an error naming AllowHosts", err)
	}
}
