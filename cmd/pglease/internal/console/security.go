package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// ContentSecurityPolicy is the policy of every response: the page loads
// its own script and style sheet and nothing else, and talks to nothing
// but its own origin.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// securityHeaders sets the headers every response carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// TokenCookie is the cookie that carries the access token's stand-in
// once a browser presented ?token=.
const TokenCookie = "pglease_console"

// cookieValue is what the cookie holds for token: a hash, so that the
// token itself is not stored in the browser.
func cookieValue(token string) string {
	sum := sha256.Sum256([]byte("pglease console cookie\x00" + token))
	return hex.EncodeToString(sum[:])
}

// equal compares secrets in constant time.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// requireToken lets a request through when it carries the access token:
// "Authorization: Bearer TOKEN", the cookie, or ?token=TOKEN on a GET,
// which sets the cookie and redirects to the same URL without the token.
func (c *Console) requireToken(next http.Handler) http.Handler {
	if c.cfg.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(strings.TrimSpace(auth), c.cfg.Token) {
			next.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		if t, ok := q["token"]; ok && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			if len(t) == 1 && equal(t[0], c.cfg.Token) {
				http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: c.cookie, Path: "/",
					HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
				q.Del("token")
				u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
				http.Redirect(w, r, u.String(), http.StatusSeeOther)
				return
			}
			unauthorized(w)
			return
		}
		if ck, err := r.Cookie(TokenCookie); err == nil && equal(ck.Value, c.cookie) {
			next.ServeHTTP(w, r)
			return
		}
		unauthorized(w)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="pglease console"`)
	http.Error(w, "401 unauthorized: this console needs its access token. In a browser, open it once as "+
		"/?token=TOKEN (a cookie keeps it); other clients send the header Authorization: Bearer TOKEN.",
		http.StatusUnauthorized)
}

// crossOrigin refuses a state-changing request from another origin
// (Sec-Fetch-Site, else Origin against Host, as browsers send them); a
// request with neither header (curl, a script) passes it, and still needs
// the release form's token.
var crossOrigin = http.NewCrossOriginProtection()

// NeedsToken reports whether a console listening on addr (host:port) is
// reachable from other hosts, and so must require an access token: every
// address but a loopback one (127.0.0.0/8, ::1, localhost). An empty host
// means every interface.
func NeedsToken(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true, fmt.Errorf("%q is not HOST:PORT (example: 127.0.0.1:8080)", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return false, nil
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip == nil || !ip.IsLoopback(), nil
}
