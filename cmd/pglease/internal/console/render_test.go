package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/cmd/pglease/internal/console"
	"github.com/pglease/pglease/internal/pgtest"
)

// Names, owners and metadata are text in the server's render: nothing a
// lease row holds becomes markup.
func TestServerRenderEscapesNamesAndMetadata(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{AllowRelease: true})
	f.client() // creates the table
	const name = `<script>alert(1)</script>`
	const owner = `"><img src=x onerror=alert(2)>`
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), f.table)
	leases.Insert(name, owner, 7, time.Minute, `{"note": "</code><script>alert(3)</script>", "q": "a\"b'c&d"}`)
	var body string
	pgtest.WaitFor(t, pgtest.Patience, "the page to show the row", func() bool {
		_, body = f.get("/")
		return strings.Contains(body, "alert(3)")
	})
	for _, bad := range []string{"<script>alert", "<img src=x", "</code><script>"} {
		if strings.Contains(body, bad) {
			t.Errorf("the page contains %q unescaped", bad)
		}
	}
	for _, good := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt;",                            // the name, as text
		`aria-label="Force-release &lt;script&gt;alert(1)&lt;/script&gt;"`, // in an attribute
		"&#34;&gt;&lt;img src=x onerror=alert(2)&gt;",                      // the owner
		"&lt;/code&gt;&lt;script&gt;alert(3)&lt;/script&gt;",               // the metadata
	} {
		if !strings.Contains(body, good) {
			t.Errorf("the page lacks %s", good)
		}
	}
	if n := strings.Count(body, "<script"); n != 1 {
		t.Errorf("the page has %d script elements, want 1 (console.js)", n)
	}

	// The event stream carries them as JSON strings, for textContent.
	m := await(t, f.stream(), "the row in the stream", func(m msg) bool { return m.state(name) == "held" })
	for _, l := range m.Leases {
		if l.Name == name && (l.Owner != owner || !strings.Contains(l.Metadata, "</code><script>alert(3)</script>")) {
			t.Errorf("the stream shows %+v", l)
		}
	}
}

// On a database without the table the console says so and creates
// nothing, also when it may force-release.
func TestMissingTableChangesNothing(t *testing.T) {
	t.Parallel()
	schema := fmt.Sprintf("console_missing_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { pgtest.Exec(t, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	for _, table := range []string{schema + ".leases", pgtest.Schema(t) + ".leases"} {
		f := start(t, console.Config{Table: table, AllowRelease: true})
		_, body := f.get("/")
		if !strings.Contains(body, "no lease table "+table+" yet</p>") || strings.Contains(body, `id="missing" class="missing" hidden`) {
			t.Errorf("the page of %s does not say that the table is missing:\n%s", table, body)
		}
		resp, body := f.do(f.request(http.MethodPost, "/release", "csrf="+f.csrf()+"&name=x&confirm=yes"))
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no lease table") {
			t.Errorf("release on a missing table: %s, want 404:\n%s", resp.Status, body)
		}
		resp, body = f.get("/healthz")
		var h struct {
			Table    bool `json:"table_present"`
			Database bool `json:"database_reachable"`
		}
		if err := json.Unmarshal([]byte(body), &h); err != nil || resp.StatusCode != 200 || h.Table || !h.Database {
			t.Errorf("/healthz: %s %s", resp.Status, body)
		}
		m := await(t, f.stream(), "a snapshot", func(msg) bool { return true })
		if m.Status.Exists || len(m.Leases) != 0 {
			t.Errorf("the stream shows %+v", m)
		}
		if pgtest.Value[bool](t, "SELECT to_regclass($1) IS NOT NULL OR to_regclass($2) IS NOT NULL", table, table+"_token_seq") {
			t.Fatalf("the console created %s or its sequence", table)
		}
	}
	if pgtest.Value[int64](t, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema) != 0 {
		t.Fatalf("the console created the schema %s", schema)
	}
}

// A server that refuses the console's read (here: no SELECT on the lease
// table) is reachable: the page says that the table cannot be read, and
// why; /healthz answers 503 with database_reachable and table_present
// true and the server's error, never an unreachable database.
func TestARefusedReadIsNotAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	owner := start(t, console.Config{})
	owner.client() // creates the table
	dsn := pgtest.SelectOnlyDSN(t, owner.table+"_waiters")
	f := serve(t, console.Config{DSN: dsn, Table: owner.table})
	m := await(t, f.stream(), "the refusal", func(m msg) bool { return m.Status.Class == "down" && m.Status.Text != "connecting to the database…" })
	if !strings.HasPrefix(m.Status.Text, "cannot read "+owner.table+", retrying: ") || !strings.Contains(m.Status.Text, "permission denied for table leases") {
		t.Errorf("the page's status: %q; want that it cannot read the table, and why", m.Status.Text)
	}
	resp, body := f.get("/healthz")
	var h struct {
		Database bool   `json:"database_reachable"`
		Table    bool   `json:"table_present"`
		Error    string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil || resp.StatusCode != http.StatusServiceUnavailable ||
		!h.Database || !h.Table || !strings.Contains(h.Error, "permission denied for table leases") {
		t.Errorf("/healthz of a refused read: %s %s; want 503, reachable, the table present, the error", resp.Status, body)
	}
}

// The console sees the table appear, and says so in its feed.
func TestTableCreatedLaterIsShown(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{})
	s := f.stream()
	await(t, s, "the table missing", func(m msg) bool { return !m.Status.Exists && m.Status.Class != "down" })
	f.client() // creates the table
	m := await(t, s, "the table present", func(m msg) bool { return m.Status.Exists })
	if !feedHas(m, "table", "the lease table was created") {
		t.Errorf("feed %+v", m.Feed)
	}
}
