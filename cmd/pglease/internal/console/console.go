// Package console is the operator console of pglease serve: a web page
// that lists every lease of one lease table and updates itself as leases
// are acquired, released, lost or expire, with /metrics (Prometheus) and
// /healthz beside it.
//
// One hub per console reads the table and pushes each change to every
// viewer over server-sent events, so the database sees the same load
// whatever the number of viewers: one connection that LISTENs on the
// table's notification channel (releases and force-releases notify it), a
// timer at the next expiry (or staleness) instant, a read of the token
// sequence's last value every Config.Poll (every acquisition attempt draws
// a token; the table is re-read only when it moved) and a full re-read
// every few seconds as a fallback.
//
// The console only reads unless Config.AllowRelease is set; it never
// creates or alters the lease table.
package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pglease/pglease"
)

// Config configures a Console. DSN and Table follow the conventions of
// the pglease command (libpq DSN; "[schema.]table").
type Config struct {
	// DSN is the connection string; "" takes everything from the PG*
	// environment variables.
	DSN string
	// Table is the lease table, "[schema.]table"; "" is pglease_leases.
	Table string
	// AppName is the application_name of the console's connections (the
	// listener's gets " listener" appended); "" keeps the DSN's, else
	// "pglease serve".
	AppName string
	// AllowRelease adds a force-release button to every row (and the POST
	// /release endpoint behind it); without it the console only reads.
	AllowRelease bool
	// Token, when not empty, is required on every request: as
	// "Authorization: Bearer TOKEN", or once as ?token=TOKEN, which sets a
	// cookie.
	Token string
	// AllowHosts are the host names and IP addresses, besides loopback
	// addresses and localhost, that a request may address the console by
	// (its Host header, any port). Without a Token the console answers
	// only requests addressed to a loopback address, localhost or one of
	// these, and a state-changing request only when its Origin, if it has
	// one, names one of them too: a page of another site whose name
	// resolves to this machine (DNS rebinding) gets 421 and cannot act.
	// With a Token the token is what keeps others out, and any Host is
	// answered unless AllowHosts names some. Each must pass
	// CheckAllowHost.
	AllowHosts []string
	// StaleAfter is the heartbeat age after which a held lease is shown as
	// stale; 0 means half of each lease's TTL (as pglease ls).
	StaleAfter time.Duration
	// MetricsPerLease adds per-lease series to /metrics: every lease name
	// becomes a time series.
	MetricsPerLease bool
	// Poll is how often the token sequence is read to detect acquisitions
	// (and how often the table is re-read when the sequence cannot be
	// read). Default 250ms.
	Poll time.Duration
	// FullRefresh is how often the table is re-read whatever happened (it
	// catches renewals, which signal nothing). Default 2s.
	FullRefresh time.Duration
	// Logger receives the console's log; default none.
	Logger *slog.Logger
	// Redact removes secrets from messages shown on the page; default none.
	Redact func(string) string
}

// Defaults of Config.
const (
	DefaultPoll        = 250 * time.Millisecond
	DefaultFullRefresh = 2 * time.Second
)

// Console serves the operator console of one lease table. Create it with
// Open, serve its Handler, and Close it.
type Console struct {
	cfg     Config
	pool    *pgxpool.Pool
	client  *pglease.Client // reads the rows; force-releases with AllowRelease
	hub     *hub
	csrf    string   // per-process token of the release form
	cookie  string   // the cookie value that stands for Token
	hosts   []string // AllowHosts, canonical (see hostKey); nil: any Host
	handler http.Handler

	stop     context.CancelFunc
	wg       sync.WaitGroup
	closeOne sync.Once
}

// Open checks cfg, connects (the first connection must succeed), and
// starts the hub. It changes nothing in the database.
func Open(ctx context.Context, cfg Config) (*Console, error) {
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.FullRefresh == 0 {
		cfg.FullRefresh = DefaultFullRefresh
	}
	if cfg.Poll < 0 || cfg.FullRefresh < 0 || cfg.StaleAfter < 0 {
		return nil, errors.New("console: Poll, FullRefresh and StaleAfter must not be negative")
	}
	for _, h := range cfg.AllowHosts {
		if err := CheckAllowHost(h); err != nil {
			return nil, fmt.Errorf("console: AllowHosts: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Redact == nil {
		cfg.Redact = func(s string) string { return s }
	}
	objs, err := objectsOf(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("console: table: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("console: DSN: %w", err)
	}
	app := cfg.AppName
	if app == "" {
		app = pcfg.ConnConfig.RuntimeParams["application_name"]
	}
	if app == "" {
		app = "pglease serve"
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = truncate(app, 63)
	pcfg.MaxConns = 3
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	listenCfg := pcfg.ConnConfig.Copy()
	listenCfg.RuntimeParams["application_name"] = truncate(app, 63-len(" listener")) + " listener"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("console: DSN: %w", err)
	}
	// Bounded by ctx: pgx bounds each host of the DSN by ConnectTimeout.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w (is the server running and the DSN right?)", err)
	}
	c := &Console{cfg: cfg, pool: pool, csrf: randomToken()}
	if cfg.Token == "" || len(cfg.AllowHosts) > 0 {
		c.hosts = []string{} // loopback and localhost only
		for _, h := range cfg.AllowHosts {
			c.hosts = append(c.hosts, hostKey(strings.Trim(h, "[]")))
		}
	}
	if cfg.Token != "" {
		c.cookie = cookieValue(cfg.Token)
	}
	// DisableAutoMigrate: a force-release on a missing table fails instead
	// of creating it (and reads never create anything).
	owner := truncate(app, 255)
	if owner == "" || (pglease.Config{Owner: owner}).Validate() != nil {
		owner = "pglease serve" // an application_name pglease refuses as an owner
	}
	c.client, err = pglease.NewFromPool(pool, pglease.Config{Table: cfg.Table, Owner: owner, DisableAutoMigrate: true})
	if err != nil {
		pool.Close()
		return nil, err
	}
	c.hub = newHub(cfg, objs, pool, c.client, listenCfg)
	hctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	c.hub.start(hctx, &c.wg)
	c.handler = c.routes()
	return c, nil
}

// Handler is the console's HTTP handler: the page, its assets, the event
// stream, /metrics, /healthz and, with AllowRelease, /release.
func (c *Console) Handler() http.Handler { return c.handler }

// Ready is closed once the hub has read the table (or failed to) for the
// first time.
func (c *Console) Ready() <-chan struct{} { return c.hub.ready }

// Refreshes reports how many times the hub has read the table: the same
// however many viewers there are.
func (c *Console) Refreshes() int64 { return c.hub.refreshes.Load() }

// Viewers reports how many event streams are open.
func (c *Console) Viewers() int { return c.hub.viewers() }

// CloseStreams ends every event stream, so that an http.Server can shut
// down (register it with RegisterOnShutdown); new streams end at once.
func (c *Console) CloseStreams() { c.hub.closeStreams() }

// Close ends the event streams, stops the hub and closes the connections.
func (c *Console) Close() error {
	c.closeOne.Do(func() {
		c.hub.closeStreams()
		c.stop()
		c.wg.Wait()
		_ = c.client.Close()
		c.pool.Close()
	})
	return nil
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// truncate shortens s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
