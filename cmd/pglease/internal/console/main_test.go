package console_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/cmd/pglease/internal/console"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a console on a fresh lease table of the shared test server,
// served by an httptest.Server.
type fixture struct {
	t     *testing.T
	c     *console.Console
	srv   *httptest.Server
	cfg   console.Config
	table string
}

// start opens a console with cfg (DSN, Table and AppName filled in when
// empty) and serves it once it has read the table; both are closed when the
// test ends.
func start(t *testing.T, cfg console.Config) *fixture {
	t.Helper()
	f := serve(t, cfg)
	pgtest.Receive(t, f.c.Ready(), "the console's first read")
	return f
}

// serve is start without waiting for the console's first read.
func serve(t *testing.T, cfg console.Config) *fixture {
	t.Helper()
	if cfg.DSN == "" {
		cfg.DSN = pgtest.DSN(t)
	}
	if cfg.Table == "" {
		cfg.Table = pgtest.Schema(t) + ".leases"
	}
	if cfg.AppName == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		cfg.AppName = "console-test-" + hex.EncodeToString(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	c, err := console.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("console.Open: %v", err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() {
		c.CloseStreams()
		srv.Close()
		c.Close()
	})
	return &fixture{t: t, c: c, srv: srv, cfg: cfg, table: cfg.Table}
}

// client opens a pglease client of the fixture's table (creating the table).
func (f *fixture) client() *pglease.Client {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	c, err := pglease.Open(ctx, pgtest.DSN(f.t), pglease.Config{Table: f.table, Owner: "tester"})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := admin.Migrate(ctx, c); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// do sends a request to the fixture's server and returns the response with
// its body read.
func (f *fixture) do(req *http.Request) (*http.Response, string) {
	f.t.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

// get GETs path.
func (f *fixture) get(path string, header ...string) (*http.Response, string) {
	f.t.Helper()
	return f.do(f.request(http.MethodGet, path, "", header...))
}

// request builds a request of the fixture's server; header is name, value
// pairs.
func (f *fixture) request(method, path, body string, header ...string) *http.Request {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       pgtest.Patience,
}

var csrfField = regexp.MustCompile(`data-csrf="([0-9a-f]+)"`)

// csrf reads the release form's token from the page.
func (f *fixture) csrf() string {
	f.t.Helper()
	_, body := f.get("/")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		f.t.Fatalf("no csrf field in the page:\n%s", body)
	}
	return m[1]
}

// msg is a snapshot as the event stream sends it.
type msg struct {
	Version uint64 `json:"version"`
	Now     int64  `json:"now"`
	Status  struct {
		Text     string `json:"text"`
		Class    string `json:"class"`
		Exists   bool   `json:"exists"`
		Listener bool   `json:"listener"`
		Queues   bool   `json:"queues"`
	} `json:"status"`
	Leases []struct {
		Name     string `json:"name"`
		Owner    string `json:"owner"`
		Token    string `json:"token"`
		State    string `json:"state"`
		Expires  int64  `json:"expires"`
		Metadata string `json:"metadata"`
		Kind     string `json:"kind"`
		Of       string `json:"of"`
		Size     int    `json:"size"`
		Weight   int    `json:"weight"`
		Label    string `json:"kind_label"`
		Waiters  []struct {
			Owner string `json:"owner"`
			Since int64  `json:"since"`
			Kind  string `json:"kind"`
			Label string `json:"kind_label"`
		} `json:"waiters"`
	} `json:"leases"`
	Feed []struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
		Text string `json:"text"`
	} `json:"feed"`
	received time.Time
}

// state returns the state of lease name in m, or "" when it is not there.
func (m msg) state(name string) string {
	for _, l := range m.Leases {
		if l.Name == name {
			return l.State
		}
	}
	return ""
}

// waiters returns the owners waiting for lease name in m, first in line
// first.
func (m msg) waiters(name string) (owners []string) {
	for _, l := range m.Leases {
		if l.Name == name {
			for _, w := range l.Waiters {
				owners = append(owners, w.Owner)
			}
		}
	}
	return owners
}

// stream opens an event stream and returns its snapshots as they arrive;
// it is closed when the test ends.
func (f *fixture) stream() <-chan msg {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/events", nil)
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		cancel()
		resp.Body.Close()
		f.t.Fatalf("GET /events: %s, Content-Type %q", resp.Status, ct)
	}
	ch := make(chan msg, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m msg
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				f.t.Errorf("event stream: %v in %s", err, data)
				return
			}
			m.received = time.Now()
			select {
			case ch <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	f.t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return ch
}

// await returns the first snapshot from ch for which cond holds, failing
// the test after pgtest.Patience.
func await(t *testing.T, ch <-chan msg, what string, cond func(msg) bool) msg {
	t.Helper()
	timeout := time.NewTimer(pgtest.Patience)
	defer timeout.Stop()
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("event stream ended while waiting for %s", what)
			}
			if cond(m) {
				return m
			}
		case <-timeout.C:
			t.Fatalf("timed out after %s waiting for %s", pgtest.Patience, what)
		}
	}
}
