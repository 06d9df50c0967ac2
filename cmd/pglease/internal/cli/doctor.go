package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/cmd/pglease/internal/human"
)

var doctorFlags = append([]flagSpec{
	jsonFlag,
	{name: "ttl", kind: durationFlag, arg: "DURATION", usage: "the lease TTL your clients use, to judge the server's timeouts by (default 30s)"},
	{name: "fleet", kind: intFlag, arg: "N", usage: "how many clients will connect at once: check that the server has room for them"},
}, connFlags...)

// The outcomes of a check.
const (
	checkOK   = "ok"
	checkWarn = "warn" // pglease works, but something should change
	checkFail = "fail" // pglease cannot work as configured
)

// exitWarnings is doctor's exit status when checks warned and none
// failed.
const exitWarnings = 3

// check is one finding of pglease doctor.
type check struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Summary string `json:"summary"`          // what was found
	Advice  string `json:"advice,omitempty"` // what to change, for warn and fail
}

// doctor is a run of pglease doctor: its settings, its two connections
// (a, the main one, and b, for the probes that need a second session)
// and what it found.
type doctor struct {
	e      *env
	dsn    string
	table  string // as given, "" for the default
	ttl    time.Duration
	fleet  int
	a, b   *pgx.Conn
	pooled bool // a pooler stands in the path (the pooler check)
	checks []check
}

func (d *doctor) add(name, status, summary, advice string) {
	d.checks = append(d.checks, check{Name: name, Status: status, Summary: summary, Advice: advice})
}

// pglease doctor checks what a deployment needs before it relies on
// pglease, and says what to change.
func (e *env) cmdDoctor(ctx context.Context, args []string) int {
	fs, code, done := e.parse("doctor", args)
	if done {
		return code
	}
	if err := noArgs(fs); err != nil {
		return e.usage("doctor", err)
	}
	d := &doctor{e: e, table: fs.str("table"), ttl: fs.duration("ttl", 30*time.Second), fleet: fs.integer("fleet", 0)}
	switch {
	case d.ttl < time.Second:
		return e.usage("doctor", usagef("invalid --ttl %s: a lease's TTL is at least 1s", fs.str("ttl")))
	case fs.isSet("fleet") && d.fleet < 1:
		return e.usage("doctor", usagef("invalid --fleet %s: give the number of clients, 1 or more", fs.str("fleet")))
	}
	if err := checkTable(d.table); err != nil {
		return e.usage("doctor", err)
	}
	d.dsn = e.resolveDSN(fs.str("dsn"), fs.isSet("dsn"))
	if err := e.checkDSN(d.dsn); err != nil {
		return e.usage("doctor", err)
	}
	e.noteDefaults()
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	d.run(ctx)
	return d.report(fs.boolean("json"))
}

// run runs every check; a failed connection ends it.
func (d *doctor) run(ctx context.Context) {
	var err error
	if d.a, err = d.connect(ctx); err != nil {
		d.add("connect", checkFail, "cannot connect to "+d.e.server+": "+d.e.redact(err.Error()),
			"check the DSN (--dsn, $PGLEASE_DSN, $DATABASE_URL or the PG* variables), that the server is running and that pg_hba.conf admits this role from this host")
		return
	}
	defer d.a.Close(context.WithoutCancel(ctx))
	if d.b, err = d.connect(ctx); err != nil {
		d.add("connect", checkFail, "connected once, but a second connection failed: "+d.e.redact(err.Error()),
			"every client needs a connection of its own, and pglease's waits and fast failover a second session now and then: raise the role's or the database's connection limit")
		return
	}
	defer d.b.Close(context.WithoutCancel(ctx))
	for _, c := range []func(context.Context) error{d.server, d.privileges, d.pooler, d.notify, d.timeouts, d.replication, d.clock, d.headroom} {
		if err := c(ctx); err != nil {
			d.add("query", checkFail, "a check's query failed: "+d.e.redact(err.Error()), "see the error; the checks after it did not run")
			return
		}
	}
}

func (d *doctor) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(d.dsn)
	if err != nil {
		return nil, err
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "pglease doctor"
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// server: the version, and that it is a primary.
func (d *doctor) server(ctx context.Context) error {
	var version string
	var num int
	var standby bool
	err := d.a.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int, pg_is_in_recovery()`).
		Scan(&version, &num, &standby)
	if err != nil {
		return err
	}
	switch {
	case standby:
		d.add("server", checkFail, "PostgreSQL "+version+", a standby (read-only)",
			"point the DSN at the primary: leases are written, and a standby refuses writes")
	case num < 150000:
		d.add("server", checkWarn, "PostgreSQL "+version+", a primary",
			"pglease's test suites run on PostgreSQL 15; older servers are untested")
	default:
		d.add("server", checkOK, "PostgreSQL "+version+", a primary", "")
	}
	return nil
}

// privileges: the role's on the table's schema and every object of the
// table that exists (the lease, waiters, jobs and runs tables, the token
// sequence, the functions), or, without the table, whether the role may
// create it.
func (d *doctor) privileges(ctx context.Context) error {
	table := tableName(d.table)
	var role, schema, rel string
	var exists bool
	err := d.a.QueryRow(ctx, doctorTableSQL, table).Scan(&role, &schema, &rel, &exists)
	if err != nil {
		return err
	}
	var schemaExists, usage, create, createDB bool
	err = d.a.QueryRow(ctx, doctorSchemaSQL, schema).Scan(&schemaExists, &usage, &create, &createDB)
	if err != nil {
		return err
	}
	if !exists {
		may := create || (!schemaExists && createDB)
		switch {
		case may:
			d.add("privileges", checkOK, fmt.Sprintf("the lease table %s does not exist yet; %s may create it (the first run, or pglease migrate)", table, role), "")
		default:
			d.add("privileges", checkFail, fmt.Sprintf("the lease table %s does not exist, and %s may not create it", table, role),
				fmt.Sprintf("create it as a role that may: pglease migrate --table %s; then grant %s the privileges docs/OPERATIONS.md lists", table, role))
		}
		return nil
	}
	var missing []string
	if !usage {
		missing = append(missing, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s;", quoteIdent(schema), quoteIdent(role)))
	}
	rows, err := d.a.Query(ctx, doctorPrivilegesSQL, schema, rel)
	if err != nil {
		return err
	}
	grants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, g := range grants {
		missing = append(missing, strings.ReplaceAll(g, "{role}", quoteIdent(role)))
	}
	if len(missing) > 0 {
		d.add("privileges", checkFail, fmt.Sprintf("%s lacks privileges on the objects of %s", role, table),
			"grant them, as a role that may:\n"+strings.Join(missing, "\n"))
		return nil
	}
	d.add("privileges", checkOK, fmt.Sprintf("%s has every privilege pglease needs on %s and its objects", role, table), "")
	return nil
}

// pooler: whether a connection pooler stands between pglease and the
// server (the backend key the connection's startup answered is not the
// server backend's pid), and if so whether it shares a backend between
// clients transaction by transaction: a probe connection's backend is
// looked at before and after b opens a transaction in between, which a
// transaction pooler gives the backend the probe just let go of
// (PgBouncer hands out the most recently used server connection first).
// A probe that then waits (a pool of one server connection, which b's
// transaction holds) is transaction pooling too.
func (d *doctor) pooler(ctx context.Context) error {
	var pid int32
	if err := d.a.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return err
	}
	if uint32(pid) == d.a.PgConn().PID() {
		d.add("pooler", checkOK, "a direct connection to the server (no pooler in the path)", "")
		return nil
	}
	d.pooled = true
	probe, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer probe.Close(context.WithoutCancel(ctx))
	var first, second int32
	if err := probe.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&first); err != nil {
		return err
	}
	tx, err := d.b.Begin(ctx)
	if err != nil {
		return err
	}
	err = tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(new(int32))
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = probe.QueryRow(pctx, `SELECT pg_backend_pid()`).Scan(&second)
		cancel()
		if err != nil && ctx.Err() == nil { // waited for b's server connection
			err, second = nil, -1
		}
	}
	_ = tx.Rollback(ctx)
	if err != nil {
		return err
	}
	if first != second {
		advice := "plain leases work through it; notifications and fast failover need a session of their own: set Config.DisableNotify for clients that connect through it, and give clients that use --fast-failover (WithFastFailover) a direct DSN"
		if !strings.Contains(d.dsn, "default_query_exec_mode") {
			advice += "; add default_query_exec_mode=exec to the DSN unless the pooler keeps prepared statements (PgBouncer 1.21 and later, with max_prepared_statements)"
		}
		d.add("pooler", checkWarn, "a transaction-pooling proxy stands between pglease and the server (such as PgBouncer with pool_mode = transaction): one connection's transactions ran on different server backends", advice+" (docs/OPERATIONS.md, PgBouncer)")
		return nil
	}
	d.add("pooler", checkWarn, "a proxy or a session-pooling pooler stands between pglease and the server: the connection's backend key is not its server backend's pid",
		"plain leases and notifications work through it; --fast-failover (WithFastFailover) is refused, as the server cannot watch the client's own connection: give clients that use it a direct DSN (docs/OPERATIONS.md, PgBouncer)")
	return nil
}

// notify: a notification sent on b reaches a, which listens, within 3 s.
func (d *doctor) notify(ctx context.Context) error {
	channel := fmt.Sprintf("pglease_doctor_%d", time.Now().UnixNano())
	if _, err := d.a.Exec(ctx, "LISTEN "+channel); err != nil {
		return err
	}
	defer func() { _, _ = d.a.Exec(context.WithoutCancel(ctx), "UNLISTEN "+channel) }()
	sent := time.Now()
	if _, err := d.b.Exec(ctx, `SELECT pg_notify($1, 'ping')`, channel); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	n, err := d.a.WaitForNotification(wctx)
	switch {
	case err == nil && n.Channel == channel:
		d.add("notify", checkOK, "a notification sent was received in "+human.Duration(time.Since(sent)), "")
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		d.add("notify", checkWarn, "a notification sent was not received within 3s",
			"waiters then learn of a release only by polling (every 5s by default) or at the holder's expiry: connect directly rather than through a transaction pooler, or set Config.DisableNotify where they cannot")
	}
	return nil
}

// timeouts: the server's timeouts for this role against the TTL.
func (d *doctor) timeouts(ctx context.Context) error {
	var idle, idleTx, stmt int64 // ms
	var kaIdle, kaInterval, kaCount int
	err := d.a.QueryRow(ctx, doctorTimeoutsSQL).Scan(&idle, &idleTx, &stmt, &kaIdle, &kaInterval, &kaCount)
	if err != nil {
		return err
	}
	ms := func(v int64) string { return human.Duration(time.Duration(v) * time.Millisecond) }
	var warns, oks []string
	var advice []string
	if idle > 0 {
		warns = append(warns, "idle_session_timeout "+ms(idle))
		advice = append(advice, "the server ends sessions idle longer than idle_session_timeout: pglease turns it off on the sessions that hold fast-failover leases, but its other connections are ended and reconnect, missing notifications meanwhile; set it to 0 for the role (ALTER ROLE … SET idle_session_timeout = 0)")
	} else {
		oks = append(oks, "idle_session_timeout off")
	}
	if stmt > 0 && time.Duration(stmt)*time.Millisecond < min(time.Second, d.ttl/3) {
		warns = append(warns, "statement_timeout "+ms(stmt))
		advice = append(advice, "a statement_timeout that short cancels renewals and acquisitions on a busy server: give the role at least 1s (ALTER ROLE … SET statement_timeout = '5s'), or 0")
	} else {
		oks = append(oks, "statement_timeout "+orOff(stmt, ms))
	}
	oks = append(oks, "idle_in_transaction_session_timeout "+orOff(idleTx, ms)+" (pglease never idles in a transaction)")
	keepalive := "TCP keep-alives: the operating system's defaults (or a Unix socket)"
	if kaIdle > 0 {
		keepalive = fmt.Sprintf("TCP keep-alives: a silent peer is dropped after about %s (tcp_keepalives_idle %ds, interval %ds, count %d)",
			human.Duration(time.Duration(kaIdle+kaInterval*kaCount)*time.Second), kaIdle, kaInterval, kaCount)
	}
	oks = append(oks, keepalive)
	if len(warns) > 0 {
		d.add("timeouts", checkWarn, strings.Join(warns, ", ")+"; "+strings.Join(oks, ", "), strings.Join(advice, "; "))
		return nil
	}
	summary := strings.Join(oks, ", ") + fmt.Sprintf("; pglease sets the TCP keep-alives and user timeout of its session-bound connections to at least the TTL (%s) itself", d.ttl)
	if d.pooled {
		d.add("timeouts", checkWarn, strings.Join(oks, ", "),
			"through a pooler, pglease's own keep-alive and timeout settings reach a shared server connection, not its own: set the pooler's server-side keep-alives (PgBouncer: tcp_keepalive, tcp_keepidle) to at least the TTL")
		return nil
	}
	d.add("timeouts", checkOK, summary, "")
	return nil
}

func orOff(v int64, f func(int64) string) string {
	if v <= 0 {
		return "off"
	}
	return f(v)
}

// replication: synchronous_commit and the standbys, which decide what a
// failover may lose (docs/HA.md).
func (d *doctor) replication(ctx context.Context) error {
	var syncCommit, names string
	var standbys int
	if err := d.a.QueryRow(ctx, doctorReplicationSQL).Scan(&syncCommit, &names, &standbys); err != nil {
		return err
	}
	summary := fmt.Sprintf("synchronous_commit %s, synchronous_standby_names %q, %d standby(s) streaming", syncCommit, names, standbys)
	switch {
	case standbys > 0 && names == "":
		d.add("replication", checkWarn, summary,
			"replication is asynchronous: a failover to a standby can lose acquisitions and releases the primary acknowledged, so two holders may each believe they hold a lease; list the standbys in synchronous_standby_names, or follow docs/HA.md after an asynchronous failover")
	case names != "" && (syncCommit == "off" || syncCommit == "local"):
		d.add("replication", checkWarn, summary,
			"synchronous_commit "+syncCommit+" acknowledges a commit before the synchronous standbys have it: set it to on (or remote_apply) for the role")
	case syncCommit == "off":
		d.add("replication", checkWarn, summary,
			"synchronous_commit off acknowledges a commit before it is on disk: a crash can lose a granted lease, which then goes to another holder while the first still runs; set it to on for the role")
	default:
		d.add("replication", checkOK, summary, "")
	}
	return nil
}

// clock: the host's clock against the server's, read between two local
// readings.
func (d *doctor) clock(ctx context.Context) error {
	var server time.Time
	before := time.Now()
	if err := d.a.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&server); err != nil {
		return err
	}
	after := time.Now()
	mid := before.Add(after.Sub(before) / 2)
	skew := server.Sub(mid)
	what := fmt.Sprintf("the server's clock is %s %s this host's (±%s)", human.Duration(skew.Abs()), map[bool]string{true: "ahead of", false: "behind"}[skew >= 0], human.Duration(after.Sub(before)/2))
	if skew.Abs() > time.Second {
		d.add("clock", checkWarn, what,
			"pglease judges leases by the server's clock, so leases are safe; but the times jobs log and the schedulers that fire by the host's clock (robfig's, gocron's) drift from the server's: synchronise both with NTP")
		return nil
	}
	d.add("clock", checkOK, what, "")
	return nil
}

// headroom: connections the server, the database and the role have room
// for, against --fleet.
func (d *doctor) headroom(ctx context.Context) error {
	var room, used int
	var limit string
	if err := d.a.QueryRow(ctx, doctorHeadroomSQL).Scan(&room, &used, &limit); err != nil {
		return err
	}
	summary := fmt.Sprintf("room for %d more connection(s) (%s; %d in use)", room, limit, used)
	switch {
	case d.fleet > 0 && room < d.fleet:
		d.add("headroom", checkFail, summary+fmt.Sprintf("; a fleet of %d clients needs %d, one each", d.fleet, d.fleet),
			"raise max_connections (or the role's or database's CONNECTION LIMIT), or put a transaction pooler in front of the clients that use no fast failover")
	case d.fleet > 0 && room < d.fleet+d.fleet/5+2:
		d.add("headroom", checkWarn, summary+fmt.Sprintf("; a fleet of %d clients needs %d at rest, a few more while they start", d.fleet, d.fleet),
			"leave room for restarts and rolling deploys, when old and new clients overlap: raise max_connections or the limit that binds")
	default:
		if d.fleet > 0 {
			summary += fmt.Sprintf("; enough for a fleet of %d clients, one connection each", d.fleet)
		}
		d.add("headroom", checkOK, summary, "")
	}
	return nil
}

// report prints the findings and returns the exit status: 0 when every
// check passed, 3 when some warned, 1 when one failed.
func (d *doctor) report(asJSON bool) int {
	status, code := checkOK, exitOK
	for _, c := range d.checks {
		switch {
		case c.Status == checkFail:
			status, code = checkFail, exitError
		case c.Status == checkWarn && status == checkOK:
			status, code = checkWarn, exitWarnings
		}
	}
	if asJSON {
		b, err := json.MarshalIndent(struct {
			Status string  `json:"status"`
			Server string  `json:"server"`
			Table  string  `json:"table"`
			TTL    float64 `json:"ttl_seconds"`
			Checks []check `json:"checks"`
		}{status, d.e.server, tableName(d.table), d.ttl.Seconds(), d.checks}, "", "  ")
		if err != nil {
			return d.e.fail(err)
		}
		fmt.Fprintf(d.e.stdout, "%s\n", d.e.redact(string(b)))
		return code
	}
	fmt.Fprintf(d.e.stdout, "pglease doctor: %s, table %s, TTL %s\n\n", d.e.server, tableName(d.table), d.ttl)
	for _, c := range d.checks {
		fmt.Fprintf(d.e.stdout, "%-5s %-12s %s\n", c.Status, c.Name, c.Summary)
		for i, line := range strings.Split(c.Advice, "\n") {
			if line == "" {
				continue
			}
			arrow := "→ "
			if i > 0 {
				arrow = "  "
			}
			fmt.Fprintf(d.e.stdout, "%19s%s%s\n", "", arrow, line)
		}
	}
	switch status {
	case checkOK:
		fmt.Fprintln(d.e.stdout, "\nall is well")
	case checkWarn:
		fmt.Fprintln(d.e.stdout, "\npglease works here; the warnings above say what to change")
	default:
		fmt.Fprintln(d.e.stdout, "\npglease cannot work here as it is: the failures above say what to change")
	}
	return code
}

// quoteIdent quotes a name for the GRANT statements doctor suggests.
func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }
