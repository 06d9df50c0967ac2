package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/cmd/pglease/internal/console"
	"github.com/pglease/pglease/internal/pgtest"
)

var wantHeaders = map[string]string{
	"Content-Security-Policy":    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Content-Type-Options":     "nosniff",
	"Referrer-Policy":            "no-referrer",
	"X-Frame-Options":            "DENY",
	"Cache-Control":              "no-store",
	"Cross-Origin-Opener-Policy": "same-origin",
}

func checkHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, v := range wantHeaders {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
}

// paths are the console's GET endpoints (and two that do not exist).
var paths = []string{"/", "/static/console.js", "/static/console.css", "/healthz", "/metrics", "/nope", "/release", "/events"}

// Every response, errors included, carries the security headers.
func TestSecurityHeadersOnEveryPath(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{AllowRelease: true})
	for _, p := range paths {
		if p == "/events" {
			resp, err := noRedirect.Get(f.srv.URL + p) // a stream: the headers are enough
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			checkHeaders(t, "GET "+p, resp.Header)
			continue
		}
		resp, _ := f.get(p)
		checkHeaders(t, "GET "+p+" ("+resp.Status+")", resp.Header)
	}
	resp, _ := f.do(f.request(http.MethodPost, "/release", "name=x"))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST /release without a token: %s, want 403", resp.Status)
	}
	checkHeaders(t, "POST /release", resp.Header)
	if resp, body := f.get("/static/console.js"); resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") || !strings.Contains(body, "EventSource") {
		t.Errorf("GET /static/console.js: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
}

// With a token, every path needs it: as a bearer token, or once as ?token=
// which sets a cookie and redirects to the URL without it.
func TestTokenRequiredOnEveryPath(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef-secret"
	f := start(t, console.Config{Token: token, AllowRelease: true})
	for _, p := range append(paths, "/?token=wrong-token-wrong-token") {
		resp, body := f.get(p)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %s, want 401", p, resp.Status)
		}
		checkHeaders(t, "GET "+p+" (401)", resp.Header)
		if strings.Contains(body, token) {
			t.Errorf("GET %s: the response shows the token", p)
		}
		if resp, _ := f.get(p, "Authorization", "Bearer not-the-token-at-all"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong bearer token: %s, want 401", p, resp.Status)
		}
		if p == "/events" || strings.Contains(p, "?") {
			continue
		}
		resp, _ = f.get(p, "Authorization", "Bearer "+token)
		if resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("GET %s with the bearer token: %s", p, resp.Status)
		}
	}
	if resp, _ := f.do(f.request(http.MethodPost, "/release", "name=x&confirm=yes")); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /release without the token: %s, want 401", resp.Status)
	}

	// A browser opens /?token=… once.
	resp, _ := f.get("/?token=" + url.QueryEscape(token) + "&x=1")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?x=1" {
		t.Fatalf("GET /?token=: %s, Location %q; want 303 to /?x=1", resp.Status, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || strings.Contains(cookies[0].Value, token) {
		t.Fatalf("GET /?token= set %+v; want one HttpOnly, SameSite=Strict cookie without the token", cookies)
	}
	for _, p := range []string{"/", "/metrics", "/healthz", "/static/console.css"} {
		req := f.request(http.MethodGet, p, "")
		req.AddCookie(cookies[0])
		if resp, _ := f.do(req); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the cookie: %s, want 200", p, resp.Status)
		}
	}
	req := f.request(http.MethodGet, "/", "")
	req.AddCookie(&http.Cookie{Name: console.TokenCookie, Value: token})
	if resp, _ := f.do(req); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET / with the token itself as the cookie: %s, want 401", resp.Status)
	}
}

// A console reachable from other hosts needs a token.
func TestNeedsToken(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": false, "127.0.0.2:80": false, "[::1]:8080": false, "localhost:8080": false,
		":8080": true, "0.0.0.0:8080": true, "[::]:8080": true, "192.168.1.20:8080": true, "console.example.com:80": true,
	} {
		if got, err := console.NeedsToken(addr); err != nil || got != want {
			t.Errorf("NeedsToken(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := console.NeedsToken("8080"); err == nil {
		t.Error("NeedsToken(8080): no error")
	}
}

// A force-release needs a POST from the console's own page with the
// form's token, and a confirmation; until then the row stays.
func TestReleaseNeedsCSRFTokenSameOriginAndConfirmation(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{AllowRelease: true})
	c := f.client()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	l, err := c.TryAcquire(ctx, "victim", pglease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), f.table)
	csrf := f.csrf()
	form := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	refused := []struct {
		what, body string
		header     []string
		code       int
	}{
		{"no token", form("name", "victim", "confirm", "yes"), nil, 403},
		{"a wrong token", form("csrf", strings.Repeat("0", len(csrf)), "name", "victim", "confirm", "yes"), nil, 403},
		{"a cross-site request", form("csrf", csrf, "name", "victim", "confirm", "yes"), []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"another origin", form("csrf", csrf, "name", "victim", "confirm", "yes"), []string{"Origin", "http://evil.example"}, 403},
		{"no name", form("csrf", csrf, "confirm", "yes"), nil, 400},
	}
	for _, r := range refused {
		resp, body := f.do(f.request(http.MethodPost, "/release", r.body, r.header...))
		if resp.StatusCode != r.code {
			t.Errorf("release with %s: %s, want %d: %s", r.what, resp.Status, r.code, body)
		}
		if _, ok := leases.Get("victim"); !ok {
			t.Fatalf("release with %s deleted the row", r.what)
		}
	}
	if resp, _ := f.get("/release?name=victim&csrf=" + csrf + "&confirm=yes"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /release: %s, want 405", resp.Status)
	}

	events := f.stream()
	await(t, events, "victim in the stream", func(m msg) bool { return m.state("victim") == "held" })

	// Without JavaScript: a confirmation page first.
	resp, body := f.do(f.request(http.MethodPost, "/release", form("csrf", csrf, "name", "victim")))
	if resp.StatusCode != 200 || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Fatalf("release without confirm: %s, want a confirmation page:\n%s", resp.Status, body)
	}
	if _, ok := leases.Get("victim"); !ok {
		t.Fatal("the confirmation page deleted the row")
	}
	resp, body = f.do(f.request(http.MethodPost, "/release", form("csrf", csrf, "name", "victim", "confirm", "yes"),
		"Origin", f.srv.URL, "Sec-Fetch-Site", "same-origin", "Accept", "application/json"))
	want := fmt.Sprintf(`{"owner":"tester","released":"victim","token":"%d"}`, l.Token())
	if resp.StatusCode != 200 || strings.TrimSpace(body) != want {
		t.Fatalf("release: %s %s, want 200 %s", resp.Status, body, want)
	}
	if _, ok := leases.Get("victim"); ok {
		t.Fatal("the row is still there after the release")
	}
	await(t, events, "the release in the feed", func(m msg) bool {
		return m.state("victim") == "" && feedHas(m, "released", "victim force-released from this console (was tester")
	})
	resp, body = f.do(f.request(http.MethodPost, "/release", form("csrf", csrf, "name", "victim", "confirm", "yes")))
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no lease named victim") {
		t.Errorf("second release: %s, want 404 no lease named victim:\n%s", resp.Status, body)
	}
}

// Read-only by default: no release route, no button, no form token.
func TestReadOnlyHasNoReleaseRouteOrButton(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{})
	c := f.client()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	if _, err := c.TryAcquire(ctx, "keep", pglease.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, pgtest.Patience, "the page to show keep", func() bool {
		_, body := f.get("/")
		return strings.Contains(body, `data-name="keep"`)
	})
	_, body := f.get("/")
	for _, s := range []string{"<form", "<button", "csrf", "Force release", `data-allow-release="true"`} {
		if strings.Contains(body, s) {
			t.Errorf("the read-only page contains %q", s)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodGet} {
		resp, _ := f.do(f.request(m, "/release", "name=keep&confirm=yes"))
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /release on a read-only console: %s, want 404 or 405", m, resp.Status)
		}
	}
	if _, ok := pgtest.LeaseTable(t, pgtest.DSN(t), f.table).Get("keep"); !ok {
		t.Fatal("the row is gone")
	}
}
