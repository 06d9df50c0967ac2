//go:build unix

package cli_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// serveURL waits for a running pglease serve to log its URL.
func serveURL(t *testing.T, p *proc) string {
	t.Helper()
	re := regexp.MustCompile(`url=(http://\S+/)`)
	var url string
	waitFor(t, "pglease serve to listen", func() bool {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			url = m[1]
			return true
		}
		select {
		case <-p.done:
			t.Fatalf("pglease serve exited %d: %s", p.code, p.stderr)
		default:
		}
		return false
	})
	return url
}

// httpGet GETs url and returns the status and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: pgtest.Patience}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// serve's flags are checked before anything connects: the DSN names a host
// that does not exist (connecting would exit 1), and its password never
// shows.
func TestServeUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PGLEASE_DSN=postgres://u:hunter2secret@nowhere.invalid/db"}
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, nil, "--token-file FILE or $PGLEASE_SERVE_TOKEN"},
		{[]string{"--listen", ":8080"}, nil, "reachable from other hosts"},
		{[]string{"--listen", "8080"}, nil, "invalid --listen"},
		{[]string{"--token-file", filepath.Join(dir, "missing")}, nil, "no such file"},
		{[]string{"--token-file", short}, nil, "at least 16 characters"},
		{[]string{"--listen", "0.0.0.0:0"}, []string{"PGLEASE_SERVE_TOKEN=short"}, "at least 16 characters"},
		{[]string{"--poll", "1ms"}, nil, "--poll 1ms: must be between 10ms and 1m"},
		{[]string{"--poll", "soon"}, nil, "not a duration"},
		{[]string{"--stale-after", "0s"}, nil, "--stale-after 0s: must be positive"},
		{[]string{"--table", "Bad-Name"}, nil, "invalid --table"},
		{[]string{"extra"}, nil, "unexpected argument"},
		{[]string{"--allow-host", "*.example.com"}, nil, `invalid --allow-host: "*.example.com" is not a host name`},
		{[]string{"--allow-host", "console.internal:8080"}, nil, "without scheme, port or wildcard"},
		{[]string{"--allow-host", "a.internal", "--allow-host", "b.internal,"}, nil, `invalid --allow-host: "" is not a host name`},
		{[]string{"--dsn", "postgres://u:hunter2secret@host:notaport/db"}, nil, "invalid connection string"},
	} {
		code, stdout, stderr := run(t, append(env, c.env...), append([]string{"serve"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
		if strings.Contains(stderr, "hunter2secret") {
			t.Errorf("serve %v: the password shows: %s", c.args, stderr)
		}
	}
}

// serve, also with --allow-release, creates nothing on a database without
// the table, says so on its page, and stops on SIGTERM with status 0.
func TestServeCreatesNothingAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	env, _ := tableEnv(t)
	missing := fmt.Sprintf("cli_serve_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { pgtest.Exec(t, "DROP SCHEMA IF EXISTS "+missing+" CASCADE") })
	table := missing + ".leases"
	token := "a-token-of-thirty-two-characters"
	p := start(t, append(env, "PGLEASE_SERVE_TOKEN="+token), "serve", "--listen", "127.0.0.1:0", "--table", table, "--allow-release")
	url := serveURL(t, p)
	if code, _ := httpGet(t, url); code != http.StatusUnauthorized {
		t.Errorf("GET / without the token: %d, want 401", code)
	}
	// A browser: ?token= once, then the cookie.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: pgtest.Patience}
	resp, err := browser.Get(url + "?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.RawQuery != "" || !strings.Contains(string(b), "no lease table "+table+" yet") {
		t.Errorf("GET /?token=: %s at %s:\n%s", resp.Status, resp.Request.URL, b)
	}
	// A scraper: the bearer token.
	req, _ := http.NewRequest(http.MethodGet, url+"metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "pglease_table_exists 0") {
		t.Errorf("GET /metrics: %s:\n%s", resp.Status, b)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("serve after SIGTERM: exit %d, want 0: %s", code, p.stderr)
	}
	if strings.Contains(p.stderr.String(), token) {
		t.Errorf("the log shows the token: %s", p.stderr)
	}
	if pgtest.Value[bool](t, "SELECT to_regclass($1) IS NOT NULL OR to_regclass($2) IS NOT NULL", table, table+"_token_seq") {
		t.Fatalf("serve created %s or its sequence", table)
	}
	if pgtest.Value[int64](t, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", missing) != 0 {
		t.Fatalf("serve created the schema %s", missing)
	}
}

// Without a token serve answers only requests addressed to it by loopback,
// localhost or an --allow-host name (repeated, or a list); a page whose
// name resolves to this machine gets 421 and what to do.
func TestServeAnswersOnlyItsOwnHostNames(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	p := start(t, env, "serve", "--listen", "127.0.0.1:0", "--table", table,
		"--allow-host", "console.internal", "--allow-host", "ops.example, 192.168.1.20")
	url := serveURL(t, p)
	for host, want := range map[string]int{"": 200, "localhost": 200, "console.internal:8080": 200, "OPS.example": 200,
		"192.168.1.20": 200, "attacker.example": 421, "192.168.1.21:80": 421} {
		req, _ := http.NewRequest(http.MethodGet, url+"static/console.css", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /static/console.css with Host %q: %s, want %d: %s", host, resp.Status, want, b)
		}
		if want == 421 && !strings.Contains(string(b), "--allow-host NAME") {
			t.Errorf("GET /static/console.css with Host %q: the refusal does not say what to do: %s", host, b)
		}
	}
	if !strings.Contains(p.stderr.String(), "hosts=loopback,localhost,console.internal,ops.example,192.168.1.20") {
		t.Errorf("the log does not name the hosts it answers to: %s", p.stderr)
	}
	waitFor(t, "the refusal in the log", func() bool {
		return strings.Contains(p.stderr.String(), `refused a request addressed to another host (DNS rebinding?)" host=attacker.example`)
	})
}
