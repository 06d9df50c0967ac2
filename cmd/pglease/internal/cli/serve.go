package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pglease/pglease/cmd/pglease/internal/console"
)

var serveFlags = append([]flagSpec{
	{name: "listen", kind: stringFlag, arg: "ADDR", usage: "address to serve on (default 127.0.0.1:8080; any other than loopback needs an access token)"},
	{name: "allow-release", kind: boolFlag, usage: "add a force-release button to every lease (default: read-only)"},
	{name: "allow-host", kind: listFlag, arg: "NAME", usage: "a host name the console may be addressed by besides loopback and localhost (repeatable, or NAME,NAME)"},
	{name: "token-file", kind: stringFlag, arg: "FILE", usage: "file holding the access token required on every request (default $PGLEASE_SERVE_TOKEN)"},
	{name: "stale-after", kind: durationFlag, arg: "DURATION", usage: "show a held lease as stale when its heartbeat is older (default half its TTL)"},
	{name: "metrics-per-lease", kind: boolFlag, usage: "add per-lease series to /metrics (every lease name becomes a time series)"},
	{name: "poll", kind: durationFlag, arg: "DURATION", usage: "how often to check for acquisitions (default 250ms)"},
}, connFlags...)

const (
	defaultListen = "127.0.0.1:8080"
	// minTokenLen is the shortest access token serve accepts.
	minTokenLen = 16
	// serveTokenEnv names the variable that holds the access token.
	serveTokenEnv = "PGLEASE_SERVE_TOKEN"
)

// serveOptions are serve's validated flags.
type serveOptions struct {
	listen string
	cfg    console.Config
}

// serveOptions validates serve's command line without connecting.
func (e *env) serveOptions(fs *flagSet) (serveOptions, error) {
	o := serveOptions{listen: defaultListen}
	if err := noArgs(fs); err != nil {
		return o, err
	}
	if err := checkTable(fs.str("table")); err != nil {
		return o, err
	}
	if fs.isSet("listen") {
		o.listen = fs.str("listen")
	}
	needsToken, err := console.NeedsToken(o.listen)
	if err != nil {
		return o, usagef("invalid --listen: %s", err)
	}
	token, err := e.serveToken(fs)
	if err != nil {
		return o, err
	}
	hosts := fs.list("allow-host")
	for _, h := range hosts {
		if err := console.CheckAllowHost(h); err != nil {
			return o, usagef("invalid --allow-host: %s", err)
		}
	}
	if needsToken && token == "" {
		return o, usagef("--listen %s is reachable from other hosts: give an access token with --token-file FILE or $%s "+
			"(for example: openssl rand -hex 32 > FILE), or listen on 127.0.0.1", quoteArg(o.listen), serveTokenEnv)
	}
	poll := fs.duration("poll", console.DefaultPoll)
	if poll < 10*time.Millisecond || poll > time.Minute {
		return o, usagef("--poll %s: must be between 10ms and 1m (default 250ms)", fs.str("poll"))
	}
	stale := fs.duration("stale-after", 0)
	if fs.isSet("stale-after") && stale <= 0 {
		return o, usagef("--stale-after %s: must be positive (default: half of each lease's TTL)", fs.str("stale-after"))
	}
	o.cfg = console.Config{Table: fs.str("table"), AllowRelease: fs.boolean("allow-release"), Token: token, AllowHosts: hosts,
		StaleAfter: stale, MetricsPerLease: fs.boolean("metrics-per-lease"), Poll: poll,
		AppName: "pglease serve " + hostname(), Redact: e.redact}
	return o, nil
}

// serveToken reads the access token from --token-file, else
// $PGLEASE_SERVE_TOKEN; "" when neither is given.
func (e *env) serveToken(fs *flagSet) (string, error) {
	token, from := e.getenv(serveTokenEnv), "$"+serveTokenEnv
	if fs.isSet("token-file") {
		b, err := os.ReadFile(fs.str("token-file"))
		if err != nil {
			if pe := (*os.PathError)(nil); errors.As(err, &pe) {
				err = pe.Err
			}
			return "", usagef("--token-file %s: %s", quoteArg(fs.str("token-file")), err)
		}
		token, from = string(b), "--token-file "+quoteArg(fs.str("token-file"))
	} else if token == "" {
		return "", nil
	}
	token = strings.TrimSpace(token)
	if len(token) < minTokenLen || strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", usagef("the access token of %s must be at least %d characters without spaces or control characters "+
			"(for example: openssl rand -hex 32)", from, minTokenLen)
	}
	e.secrets = append(e.secrets, token)
	return token, nil
}

func (e *env) cmdServe(ctx context.Context, args []string) int {
	fs, code, done := e.parse("serve", args)
	if done {
		return code
	}
	o, err := e.serveOptions(fs)
	if err != nil {
		return e.usage("serve", err)
	}
	dsn := e.resolveDSN(fs.str("dsn"), fs.isSet("dsn"))
	if err := e.checkDSN(dsn); err != nil {
		return e.usage("serve", err)
	}
	o.cfg.DSN = dsn
	log := slog.New(slog.NewTextHandler(redactingWriter{e}, nil))
	o.cfg.Logger = log

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	openCtx, cancel := context.WithTimeout(ctx, adminTimeout)
	c, err := console.Open(openCtx, o.cfg)
	cancel()
	if err != nil {
		return e.fail(err)
	}
	defer c.Close()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return e.fail(fmt.Errorf("cannot listen on %s: %w", o.listen, err))
	}
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(c.CloseStreams)
	mode := "read-only"
	if o.cfg.AllowRelease {
		mode = "force-release allowed"
	}
	log.Info("pglease serve: console listening", "url", "http://"+ln.Addr().String()+"/",
		"table", tableName(o.cfg.Table), "mode", mode, "token_required", o.cfg.Token != "", "hosts", answersTo(o.cfg), "poll", o.cfg.Poll)
	if o.cfg.MetricsPerLease {
		log.Warn("--metrics-per-lease: " + console.PerLeaseWarning + " in /metrics; mind the cardinality of large tables")
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return e.fail(fmt.Errorf("serving on %s: %w", o.listen, err))
	case <-ctx.Done():
	}
	log.Info("pglease serve: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-served
	return exitOK
}

// answersTo says which Host names the console answers to, for its log.
func answersTo(cfg console.Config) string {
	if cfg.Token != "" && len(cfg.AllowHosts) == 0 {
		return "any (with the token)"
	}
	return strings.Join(append([]string{"loopback", "localhost"}, cfg.AllowHosts...), ",")
}
