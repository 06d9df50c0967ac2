package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
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

// checkHost answers a request only when it is addressed to this console:
// its Host is a loopback address (127.0.0.0/8, [::1]), localhost or one of
// Config.AllowHosts, on any port; else 421. A state-changing request (any
// method but GET, HEAD and OPTIONS) whose Origin names another host gets
// 403. This is what stops DNS rebinding: a page of attacker.example, whose
// name the attacker points at 127.0.0.1 once the page has loaded, reaches
// the console from the browser as its own origin, so Sec-Fetch-Site and
// CrossOriginProtection see nothing wrong; its Host and Origin still say
// attacker.example. Without AllowHosts and with a Token, it lets everything
// through: the token is what a rebinding page lacks.
func (c *Console) checkHost(next http.Handler) http.Handler {
	if c.hosts == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.hostAllowed(r.Host) {
			c.cfg.Logger.Warn("refused a request addressed to another host (DNS rebinding?)",
				"host", clip(r.Host), "method", r.Method, "path", clip(r.URL.Path), "remote", r.RemoteAddr)
			http.Error(w, fmt.Sprintf("421 misdirected request: this console answers only requests addressed to "+
				"%s, not to %s (a page of another site whose name resolves to this machine must not read "+
				"or change it). Open it as %s; to reach it under another name, start pglease serve with "+
				"--allow-host NAME, or give it an access token (--token-file FILE).",
				c.allowedText(), strconv.Quote(clip(r.Host)), ownURL(r)), http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !safeMethod(r.Method) && !c.originAllowed(o) {
			c.cfg.Logger.Warn("refused a request from a page of another origin",
				"origin", clip(o), "method", r.Method, "path", clip(r.URL.Path), "remote", r.RemoteAddr)
			http.Error(w, fmt.Sprintf("403 forbidden: this request came from a page at %s, which is not this "+
				"console; use the console's own page, opened as %s (or a name given with --allow-host).",
				strconv.Quote(clip(o)), ownURL(r)), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// hostAllowed reports whether hostport, a Host header or the host of an
// Origin ("name", "name:port", "[v6]:port"), addresses this console.
func (c *Console) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if v6, ok := strings.CutPrefix(hostport, "["); ok && strings.HasSuffix(v6, "]") {
		host = strings.TrimSuffix(v6, "]")
	} else if strings.Contains(hostport, ":") {
		return false // an IPv6 address without brackets is no Host
	}
	if host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback() {
		return true
	}
	return slices.Contains(c.hosts, hostKey(host))
}

// originAllowed reports whether an Origin header names this console.
func (c *Console) originAllowed(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Opaque == "" && c.hostAllowed(u.Host)
}

// hostKey is the form in which host names are compared: IP addresses in
// their canonical form, names in lower case.
func hostKey(host string) string {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.String()
	}
	return strings.ToLower(host)
}

// allowedText lists the hosts the console answers to, for a refusal.
func (c *Console) allowedText() string {
	s := "a loopback address (127.0.0.1, [::1]) or localhost"
	if len(c.cfg.AllowHosts) > 0 {
		s += " or " + strings.Join(c.cfg.AllowHosts, ", ")
	}
	return s
}

// ownURL is the console's URL by the loopback address it listens on (the
// listener's address, when it is loopback), for a refusal.
func ownURL(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil && ap.Addr().Unmap().IsLoopback() {
			return "http://" + a.String() + "/"
		}
	}
	return "http://127.0.0.1:PORT/ or http://localhost:PORT/"
}

// clip shortens a value a client sent, for a log line or a message.
func clip(s string) string { return truncate(s, 100) }

// CheckAllowHost checks a name for Config.AllowHosts: a host name
// (letters, digits, '-', '_' and dots, as in a URL) or an IP address (an
// IPv6 one with or without brackets), without scheme, port or wildcard.
func CheckAllowHost(name string) error {
	if ip, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil && ip.Zone() == "" {
		return nil
	}
	labels := strings.Split(name, ".")
	ok := len(name) <= 253
	for _, l := range labels {
		ok = ok && l != "" && len(l) <= 63 && !strings.HasPrefix(l, "-") && !strings.HasSuffix(l, "-") &&
			!strings.ContainsFunc(l, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
			})
	}
	if !ok {
		return fmt.Errorf("%s is not a host name or IP address: give the name as it appears in the console's URL, "+
			"without scheme, port or wildcard (for example console.example.com or 192.168.1.20)", strconv.Quote(name))
	}
	return nil
}
