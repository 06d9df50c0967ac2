package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/cmd/pglease/internal/human"
	"github.com/pglease/pglease/cmd/pglease/internal/queue"
)

//go:embed assets
var assets embed.FS

var pages = template.Must(template.ParseFS(assets, "assets/*.html"))

// routes is the console's handler: every response gets the security
// headers, every request must be addressed to this console (checkHost),
// and, with a Token, carry it.
func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets/static") // cannot fail: embedded
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.page)
	mux.HandleFunc("GET /events", c.events)
	mux.HandleFunc("GET /healthz", c.healthz)
	mux.Handle("GET /metrics", c.metricsHandler())
	if c.cfg.AllowRelease {
		mux.HandleFunc("POST /release", c.release)
	}
	return securityHeaders(c.checkHost(c.requireToken(mux)))
}

// pageData is what page.html renders.
type pageData struct {
	Table                string
	CSRF                 string
	AllowRelease         bool
	Status, StatusClass  string
	Ready, Exists        bool
	Held, Stale, Expired int
	Leases               []rowData
	Feed                 []feedData // newest first
	Poll                 string
}

type rowData struct {
	Name, Owner, Token, State, Metadata string
	HeldFor, ExpiresIn, HeartbeatAge    string
	Waiting                             string // who waits, as console.js shows it
	Kind                                string // what the page shows of the row's kind beside its name (human.Kind)
}

type feedData struct {
	Key, At, Time, Kind, Text string
}

// page renders the console as of the latest snapshot, readable without
// JavaScript; the script then keeps it up to date.
func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	s, _ := c.hub.latest()
	d := pageData{Table: tableLabel(c.cfg.Table), CSRF: c.csrf, AllowRelease: c.cfg.AllowRelease,
		Ready: !s.ReadAt.IsZero(), Exists: s.Status.TableExists, Poll: c.cfg.Poll.String()}
	d.Status, d.StatusClass = s.Status.describe(d.Table, c.cfg.Poll)
	d.Held, d.Stale, d.Expired = s.counts()
	now := s.serverNowAt(time.Now())
	for _, l := range s.Leases {
		row := rowData{Name: l.Name, Owner: l.Owner, Token: strconv.FormatInt(l.Token, 10), State: l.State,
			Metadata: compactJSON(l.Metadata), HeldFor: human.Duration(now.Sub(l.AcquiredAt)),
			HeartbeatAge: human.Duration(now.Sub(l.RenewedAt)), Waiting: queue.Describe(l.Waiters, s.Status.QueuesOK, 0,
				func(o string) string { return o }, func(w admin.Waiter) time.Duration { return now.Sub(w.Since) }),
			Kind: human.Kind(l.Kind, l.Weight, l.Size)}
		if left := l.ExpiresAt.Sub(now); left > 0 && l.State != stateExpired {
			row.ExpiresIn = human.Duration(left)
		} else {
			row.ExpiresIn = "expired " + human.Duration(-left) + " ago"
		}
		d.Leases = append(d.Leases, row)
	}
	for _, e := range slices.Backward(s.Feed) {
		d.Feed = append(d.Feed, feedData{Key: e.key(), At: e.At.UTC().Format(time.RFC3339Nano),
			Time: e.At.Local().Format("15:04:05"), Kind: e.Kind, Text: e.Text})
	}
	render(w, http.StatusOK, "page.html", d)
}

// tableLabel is the table as the user named it.
func tableLabel(t string) string {
	if t == "" {
		return "pglease_leases"
	}
	return t
}

func render(w http.ResponseWriter, code int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = pages.ExecuteTemplate(w, name, data)
}

// events streams snapshots to one viewer as server-sent events: the
// current one once the console has read the table (a viewer who connects
// before its first read is not shown the empty state it starts from, which
// would say the table is missing), then each new one, until the viewer
// leaves or the console closes.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	select {
	case <-c.hub.done:
		http.Error(w, "503 the console is shutting down", http.StatusServiceUnavailable)
		return
	default:
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	select {
	case <-c.hub.ready:
	case <-c.hub.done:
		return
	case <-r.Context().Done():
		return
	}
	ch, cur, ok := c.hub.subscribe()
	if !ok {
		return
	}
	defer c.hub.unsubscribe(ch)
	// send writes a snapshot's JSON, or a keepalive comment for nil.
	send := func(data []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		var err error
		if data == nil {
			_, err = w.Write([]byte(": keepalive\n\n"))
		} else {
			_, err = w.Write(append(append([]byte("retry: 2000\nevent: snapshot\ndata: "), data...), "\n\n"...))
		}
		return err == nil && rc.Flush() == nil
	}
	// The current snapshot is encoded afresh, with the server's clock as
	// of now (it may be seconds old); the next ones as published.
	if !send(cur.marshal(tableLabel(c.cfg.Table), c.cfg.Poll)) {
		return
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.hub.done:
			return
		case s := <-ch:
			if !send(s.data) {
				return
			}
		case <-keepalive.C:
			if !send(nil) {
				return
			}
		}
	}
}

// healthJSON is the body of /healthz.
type healthJSON struct {
	Status             string   `json:"status"`
	DatabaseReachable  bool     `json:"database_reachable"`
	TablePresent       bool     `json:"table_present"`
	ListenerConnected  bool     `json:"listener_connected"`
	LastRefreshAgeSecs *float64 `json:"last_refresh_age_seconds"`
	Error              string   `json:"error,omitempty"`
}

// healthy is how recent the last successful read must be for /healthz to
// report 200: a few full refreshes.
func (c *Console) healthy() time.Duration { return max(3*c.cfg.FullRefresh, time.Second) }

// healthz reports 200 when the database was read recently, else 503.
func (c *Console) healthz(w http.ResponseWriter, _ *http.Request) {
	s, lastOK := c.hub.latest()
	h := healthJSON{Status: "ok", DatabaseReachable: s.Status.DBUp || s.Status.Refused, TablePresent: s.Status.TableExists,
		ListenerConnected: s.Status.ListenerUp, Error: s.Status.Error}
	code := http.StatusOK
	if !lastOK.IsZero() {
		age := time.Since(lastOK).Seconds()
		h.LastRefreshAgeSecs = &age
	}
	if lastOK.IsZero() || time.Since(lastOK) > c.healthy() {
		h.Status, code = "unavailable", http.StatusServiceUnavailable
		h.DatabaseReachable = s.Status.Refused
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(h)
}

// releaseData is what release.html renders: a confirmation, or the result.
type releaseData struct {
	Name, CSRF, Owner, Token, Message string
	Confirm, Done                     bool
}

// release force-releases a lease: POST only, from the console's own origin
// (crossOrigin), with the form's token. Without confirm=yes it
// shows a confirmation page (for browsers without JavaScript).
func (c *Console) release(w http.ResponseWriter, r *http.Request) {
	wantJSON := strings.Contains(r.Header.Get("Accept"), "application/json")
	fail := func(code int, msg string) {
		if wantJSON {
			writeJSON(w, code, map[string]string{"error": msg})
			return
		}
		render(w, code, "release.html", releaseData{Message: msg})
	}
	if crossOrigin.Check(r) != nil {
		fail(http.StatusForbidden, "refused: the request did not come from this console's page")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "unreadable form")
		return
	}
	if !equal(r.PostForm.Get("csrf"), c.csrf) {
		fail(http.StatusForbidden, "refused: the form's token is missing or out of date; reload the console and try again")
		return
	}
	name := r.PostForm.Get("name")
	if name == "" {
		fail(http.StatusBadRequest, "no lease name given")
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		render(w, http.StatusOK, "release.html", releaseData{Name: name, CSRF: c.csrf, Confirm: true})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	c.hub.noteReleasing(name)
	in, err := admin.ForceRelease(ctx, c.client, name)
	if err != nil {
		c.hub.forgetReleasing(name)
	}
	switch {
	case errors.Is(err, pglease.ErrNoTable): // never created by a force-release
		fail(http.StatusNotFound, "no lease table "+tableLabel(c.cfg.Table)+" yet")
		return
	case errors.Is(err, pglease.ErrNoLease):
		fail(http.StatusNotFound, "no lease named "+name)
		return
	case errors.As(err, new(*pglease.InvalidError)):
		fail(http.StatusBadRequest, c.cfg.Redact(err.Error()))
		return
	case err != nil:
		c.cfg.Logger.Error("force-release failed", "name", name, "error", c.cfg.Redact(err.Error()))
		fail(http.StatusInternalServerError, "force-release failed: "+c.cfg.Redact(err.Error()))
		return
	}
	c.hub.wake()
	c.cfg.Logger.Info("force-released from the console", "name", in.Name, "owner", in.Owner, "token", in.Token,
		"remote", r.RemoteAddr)
	d := releaseData{Name: in.Name, Owner: in.Owner, Token: strconv.FormatInt(in.Token, 10), Done: true}
	if wantJSON {
		writeJSON(w, http.StatusOK, map[string]string{"released": d.Name, "owner": d.Owner, "token": d.Token})
		return
	}
	render(w, http.StatusOK, "release.html", d)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
