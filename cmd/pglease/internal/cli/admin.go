package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/cmd/pglease/internal/human"
	"github.com/pglease/pglease/cmd/pglease/internal/queue"
	"github.com/pglease/pglease/pgleasecron"
)

var (
	jsonFlag     = flagSpec{name: "json", kind: boolFlag, usage: "print JSON instead of a table"}
	lsFlags      = append([]flagSpec{jsonFlag}, connFlags...)
	statusFlags  = append([]flagSpec{jsonFlag}, connFlags...)
	releaseFlags = append([]flagSpec{{name: "force", kind: boolFlag, usage: "required: take the lease whoever holds it"}}, connFlags...)
	schemaFlags  = connFlags[1:]
)

// adminTimeout bounds an administrative command.
const adminTimeout = 30 * time.Second

// connect validates the connection flags and opens a client. It creates
// nothing: only migrate creates the lease table. The reads of ls and status
// work with SELECT alone; release, stepdown and cleanup upgrade a table
// that exists but never create one (pglease.ErrNoTable, see noTable).
func (e *env) connect(ctx context.Context, cmd string, fs *flagSet) (*pglease.Client, int, bool) {
	table := fs.str("table")
	if err := checkTable(table); err != nil {
		return nil, e.usage(cmd, err), false
	}
	dsn := e.resolveDSN(fs.str("dsn"), fs.isSet("dsn"))
	if err := e.checkDSN(dsn); err != nil {
		return nil, e.usage(cmd, err), false
	}
	e.noteDefaults()
	c, err := pglease.Open(ctx, dsn, pglease.Config{Table: table, Owner: "admin-" + hostname()})
	if err != nil {
		return nil, e.fail(err), false
	}
	return c, 0, true
}

// noTable reports that an administrative command found no lease table, so
// that there is nothing for it to act on (what): exit 1, as other errors.
func (e *env) noTable(fs *flagSet, what string) int {
	t := tableName(fs.str("table"))
	fmt.Fprintf(e.stderr, "pglease: there is no lease table %s in %s, so %s; nothing was created or changed.\n", t, e.server, what)
	if fs.isSet("table") {
		fmt.Fprintf(e.stderr, "pglease: check the spelling of --table %s: it must name the table your jobs use; to create it, run 'pglease migrate --table %s'.\n", t, t)
	} else {
		fmt.Fprintln(e.stderr, "pglease: if your jobs use another table, name it with --table [SCHEMA.]TABLE ('pglease ls --table [SCHEMA.]TABLE' lists a table's leases).")
	}
	return exitError
}

// isDefaultTable reports whether t (a --table value, "" when not given)
// names the default lease table, pglease_leases (also spelled
// public.pglease_leases): the only one a command creates without being
// asked (run and cron), and the only one whose absence the reads (ls,
// status) take for "no leases yet" rather than an error.
func isDefaultTable(t string) bool {
	return t == "" || t == "pglease_leases" || t == "public.pglease_leases"
}

// tableExists reads whether the table exists before a read of it: a table
// named with --table that does not exist is an error (noTable, for what
// the command could not do), never "no leases", so that a typo shows.
func (e *env) tableExists(ctx context.Context, c *pglease.Client, fs *flagSet, what string) (exists bool, code int, ok bool) {
	exists, err := admin.TableExists(ctx, c)
	switch {
	case err != nil:
		return false, e.fail(err), false
	case !exists && !isDefaultTable(fs.str("table")):
		return false, e.noTable(fs, what), false
	}
	return exists, exitOK, true
}

// prepareTable readies the lease table for run and cron, which hold
// leases in it: the default table is created when missing, as every
// table is upgraded; a table named with --table must exist, so that a
// host with a typo in it can never run without mutual exclusion against
// the others (in a table of its own). The error names the table, where it
// was looked for and the command that creates it.
func (e *env) prepareTable(ctx context.Context, c *pglease.Client, table string) error {
	if err := e.checkTableExists(ctx, c, table); err != nil {
		return err
	}
	return admin.Migrate(ctx, c)
}

// checkTableExists is prepareTable's check alone: an error unless table
// is the default one or exists (c is a client of table).
func (e *env) checkTableExists(ctx context.Context, c *pglease.Client, table string) error {
	if !isDefaultTable(table) {
		exists, err := admin.TableExists(ctx, c)
		if err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("there is no lease table %s in %s; nothing was run, created or changed. Check the spelling of --table %s: it must name the table the other hosts use. To create it, run 'pglease migrate --table %s' (only the default table, pglease_leases, is created by the first run)",
				table, e.server, table, table)
		}
	}
	return nil
}

// nameArg checks that a command got exactly one valid lease name (a slot
// name included).
func nameArg(fs *flagSet) (string, error) {
	args := append(fs.args, fs.rest...)
	if len(args) != 1 {
		return "", usagef("expected one lease NAME, got %d arguments", len(args))
	}
	return args[0], checkRowName(args[0])
}

func noArgs(fs *flagSet) error {
	if args := append(fs.args, fs.rest...); len(args) > 0 {
		return usagef("unexpected argument %s", quoteArg(args[0]))
	}
	return nil
}

// adminCommand is an administrative command that connects: ls, status,
// release, stepdown, migrate, cleanup.
type adminCommand struct {
	name      string
	takesName bool                    // its one operand is a lease NAME; else it takes none
	check     func(fs *flagSet) error // further usage checks, or nil
	run       func(ctx context.Context, c *pglease.Client, fs *flagSet, name string) int
}

// runAdmin parses and checks args, reporting usage errors before anything
// connects, then connects and runs a, all within adminTimeout.
func (e *env) runAdmin(ctx context.Context, a adminCommand, args []string) int {
	fs, code, done := e.parse(a.name, args)
	if done {
		return code
	}
	var name string
	var err error
	if a.takesName {
		name, err = nameArg(fs)
	} else {
		err = noArgs(fs)
	}
	if err == nil && a.check != nil {
		err = a.check(fs)
	}
	if err != nil {
		return e.usage(a.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	c, code, ok := e.connect(ctx, a.name, fs)
	if !ok {
		return code
	}
	defer c.Close()
	return a.run(ctx, c, fs, name)
}

func (e *env) cmdList(ctx context.Context, args []string) int {
	return e.runAdmin(ctx, adminCommand{name: "ls", run: e.list}, args)
}

func (e *env) list(ctx context.Context, c *pglease.Client, fs *flagSet, _ string) int {
	exists, code, ok := e.tableExists(ctx, c, fs, "there are no leases to list")
	if !ok {
		return code
	}
	infos, err := admin.List(ctx, c)
	if err != nil {
		return e.fail(err)
	}
	queues, err := e.queuesOf(ctx, c)
	if err != nil {
		return e.fail(err)
	}
	if fs.boolean("json") {
		out := make([]leaseJSON, len(infos))
		for i, in := range infos {
			out[i] = toJSON(in, queues)
		}
		return e.printJSON(out)
	}
	switch {
	case !exists:
		fmt.Fprintf(e.stdout, "no leases: there is no lease table %s in %s yet ('pglease migrate' creates it, as does the first 'pglease run')\n",
			tableName(fs.str("table")), e.server)
		return exitOK
	case len(infos) == 0:
		fmt.Fprintf(e.stdout, "no leases in %s (%s)\n", tableName(fs.str("table")), e.server)
		return exitOK
	}
	e.printTable(infos, queues)
	return exitOK
}

// queuesOf reads who waits for what: the waiters of each name, in queue
// order. A role that may read the lease table but not its waiters table
// gets the leases all the same: the queues are nil then (unknown), and a
// warning says what to grant.
func (e *env) queuesOf(ctx context.Context, c *pglease.Client, names ...string) (map[string][]admin.Waiter, error) {
	ws, err := admin.Waiters(ctx, c, names...)
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "42501" {
		fmt.Fprintf(e.stderr, "pglease: warning: cannot tell who waits: %s (grant SELECT on the waiters table to see the queues)\n", e.redact(pe.Message))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return queue.ByName(ws), nil
}

// queueOf is the queue of a lease row (see queue.Of).
func queueOf(in pglease.Info, queues map[string][]admin.Waiter) []admin.Waiter {
	return queues[queue.Of(in)]
}

func (e *env) printTable(infos []pglease.Info, queues map[string][]admin.Waiter) {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOWNER\tTOKEN\tHELD FOR\tEXPIRES IN\tHEARTBEAT AGE\tSTATE\tWAITING")
	for _, in := range infos {
		expires := human.Duration(in.Remaining)
		if in.Remaining <= 0 {
			expires = "expired " + human.Duration(-in.Remaining) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", display(in.Name, 48), display(in.Owner, 40),
			in.Token, human.Duration(in.HeldFor), expires, human.Duration(in.HeartbeatAge), kindState(in), queue.Describe(queueOf(in, queues), queues != nil, 3,
				func(o string) string { return display(o, 40) }, func(w admin.Waiter) time.Duration { return w.Waited }))
	}
	tw.Flush()
}

func (e *env) printJSON(v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "%s\n", b)
	return exitOK
}

// state is "held", "stale" (held, but no heartbeat for more than half the
// TTL: renewals run every third of it, so at least one was missed) or
// "expired".
func state(in pglease.Info) string {
	switch {
	case in.Remaining <= 0:
		return "expired"
	case in.HeartbeatAge > in.TTL/2:
		return "stale"
	}
	return "held"
}

// kindState is the state column of the table: the state, and the row's
// kind unless it is plain or a semaphore's slot ("held (shared)"), with
// the units of its kind's size it takes when the kind has a size ("held
// (later, 3 of 10)"): see human.Kind, which names any kind the table
// records.
func kindState(in pglease.Info) string {
	if k := human.Kind(in.Kind, in.Weight, in.Size); k != "" {
		return state(in) + " (" + k + ")"
	}
	return state(in)
}

type leaseJSON struct {
	Name           string    `json:"name"`
	Owner          string    `json:"owner"`
	Token          int64     `json:"token"`
	State          string    `json:"state"`
	AcquiredAt     time.Time `json:"acquired_at"`
	RenewedAt      time.Time `json:"renewed_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	TTLSeconds     float64   `json:"ttl_seconds"`
	HeldForSeconds float64   `json:"held_for_seconds"`
	ExpiresInSecs  float64   `json:"expires_in_seconds"`
	HeartbeatAge   float64   `json:"heartbeat_age_seconds"`
	SessionBound   bool      `json:"session_bound"`
	// Kind, Of, Size and Weight are pglease.Info's: the row's kind as the
	// table records it, the name it belongs to, its kind's size and the
	// units of it the row takes.
	Kind   string `json:"kind"`
	Of     string `json:"of"`
	Size   int    `json:"size"`
	Weight int    `json:"weight"`
	// Shared is Kind == "shared", kept for the readers of earlier
	// versions' output.
	Shared   bool            `json:"shared"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Waiters: null when the role may not read the queue.
	Waiters []waiterJSON `json:"waiters"`
}

// waiterJSON is a client queued for a lease, first in line first.
type waiterJSON struct {
	Owner         string    `json:"owner"`
	Since         time.Time `json:"since"`
	WaitedSeconds float64   `json:"waited_seconds"`
	Kind          string    `json:"kind"`   // the kind of lease it waits for (admin.Waiter's)
	Shared        bool      `json:"shared"` // Kind is not "plain" (a shared lease's wait), kept for earlier versions' readers
}

func toJSON(in pglease.Info, queues map[string][]admin.Waiter) leaseJSON {
	j := leaseJSON{Name: in.Name, Owner: in.Owner, Token: in.Token, State: state(in),
		AcquiredAt: in.AcquiredAt, RenewedAt: in.RenewedAt, ExpiresAt: in.ExpiresAt,
		TTLSeconds: in.TTL.Seconds(), HeldForSeconds: in.HeldFor.Seconds(),
		ExpiresInSecs: in.Remaining.Seconds(), HeartbeatAge: in.HeartbeatAge.Seconds(),
		SessionBound: in.FastFailover, Kind: in.Kind, Of: in.Of, Size: in.Size, Weight: in.Weight,
		Shared: in.Kind == "shared"}
	if queues != nil {
		j.Waiters = []waiterJSON{}
	}
	for _, w := range queueOf(in, queues) {
		j.Waiters = append(j.Waiters, waiterJSON{Owner: w.Owner, Since: w.Since, WaitedSeconds: w.Waited.Seconds(),
			Kind: w.Kind, Shared: w.Kind != "plain"})
	}
	if json.Valid([]byte(in.Metadata)) {
		j.Metadata = json.RawMessage(in.Metadata)
	}
	return j
}

func (e *env) cmdStatus(ctx context.Context, args []string) int {
	return e.runAdmin(ctx, adminCommand{name: "status", takesName: true, run: e.status}, args)
}

// status says who holds name, however it is held: its own row for a plain
// lease, or the rows NAME#i of its shared holders, a semaphore's slots or
// a quota's holders (a row name, such as pool#0, is that row alone). It
// exits 0 when any of them is held, 3 when none is (free or expired).
func (e *env) status(ctx context.Context, c *pglease.Client, fs *flagSet, name string) int {
	exists, code, ok := e.tableExists(ctx, c, fs, display(name, 255)+" is held by nobody there")
	if !ok {
		return code
	}
	all, err := admin.List(ctx, c)
	if err != nil {
		return e.fail(err)
	}
	var rows []pglease.Info
	held := false
	for _, in := range all {
		if in.Name == name || (in.Of != "" && in.Of == name) {
			rows = append(rows, in)
			held = held || in.Remaining > 0
		}
	}
	if len(rows) == 0 {
		where := " (" + tableName(fs.str("table")) + ", " + e.server + ")"
		if !exists {
			where = ": there is no lease table " + tableName(fs.str("table")) + " in " + e.server + " yet"
		}
		if fs.boolean("json") {
			e.printJSON(map[string]any{"name": name, "state": "free"})
		} else {
			fmt.Fprintf(e.stdout, "%s is free%s\n", display(name, 255), where)
		}
		return exitFree
	}
	queues, err := e.queuesOf(ctx, c, queue.Of(rows[0]))
	if err != nil {
		return e.fail(err)
	}
	switch {
	case fs.boolean("json") && len(rows) == 1 && rows[0].Name == name:
		e.printJSON(toJSON(rows[0], queues))
	case fs.boolean("json"):
		e.printJSON(holdersJSON(name, rows, held, queues))
	default:
		e.printTable(rows, queues)
	}
	if !held {
		return exitFree
	}
	return exitOK
}

// nameJSON is status --json of a name held in rows of its own (NAME#i):
// by shared holders, a semaphore's slots or a quota's holders. A plain
// lease's (or one row's) is its leaseJSON, as ls prints it.
type nameJSON struct {
	Name  string `json:"name"`
	State string `json:"state"` // "held" when any row is held, else "expired"
	Kind  string `json:"kind"`  // the rows' kind: shared, slot, quota
	// Holders are the rows, held or expired, ordered by name.
	Holders []leaseJSON `json:"holders"`
	// Waiters: null when the role may not read the queue.
	Waiters []waiterJSON `json:"waiters"`
}

func holdersJSON(name string, rows []pglease.Info, held bool, queues map[string][]admin.Waiter) nameJSON {
	j := nameJSON{Name: name, State: "expired", Kind: rows[0].Kind, Holders: []leaseJSON{}}
	if held {
		j.State = "held"
	}
	for _, in := range rows {
		h := toJSON(in, queues)
		j.Waiters = h.Waiters // the name's queue, which each row shows too, as in ls
		j.Holders = append(j.Holders, h)
	}
	return j
}

func (e *env) cmdRelease(ctx context.Context, args []string) int {
	return e.runAdmin(ctx, adminCommand{name: "release", takesName: true,
		check: func(fs *flagSet) error {
			if !fs.boolean("force") {
				return usagef("release takes a lease from its holder: add --force to confirm")
			}
			return nil
		},
		run: e.release}, args)
}

func (e *env) release(ctx context.Context, c *pglease.Client, fs *flagSet, name string) int {
	in, err := admin.ForceRelease(ctx, c, name)
	switch {
	case errors.Is(err, pglease.ErrNoTable):
		return e.noTable(fs, "no lease "+display(name, 255)+" to release")
	case errors.Is(err, pglease.ErrNoLease):
		fmt.Fprintf(e.stderr, "pglease: no lease named %s\n", display(name, 255))
		return exitFree
	case err != nil:
		return e.fail(err)
	}
	what := "held"
	if in.Remaining <= 0 {
		what = "expired"
	}
	fmt.Fprintf(e.stdout, "released %s: owner %s, token %d, %s for %s\n",
		display(in.Name, 255), display(in.Owner, 255), in.Token, what, human.Duration(in.HeldFor))
	return exitOK
}

func (e *env) cmdStepDown(ctx context.Context, args []string) int {
	return e.runAdmin(ctx, adminCommand{name: "stepdown", takesName: true, run: e.stepDown}, args)
}

func (e *env) stepDown(ctx context.Context, c *pglease.Client, fs *flagSet, name string) int {
	err := c.RequestStepDown(ctx, name)
	switch {
	case errors.Is(err, pglease.ErrNoTable):
		return e.noTable(fs, "nothing holds "+display(name, 255)+" and nobody was asked to step down")
	case errors.Is(err, pglease.ErrNoLease):
		fmt.Fprintf(e.stderr, "pglease: nothing holds %s\n", display(name, 255))
		return exitFree
	case err != nil:
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "asked the holder of %s to step down\n", display(name, 255))
	return exitOK
}

func (e *env) cmdMigrate(ctx context.Context, args []string) int {
	return e.runAdmin(ctx, adminCommand{name: "migrate", run: e.migrate}, args)
}

func (e *env) migrate(ctx context.Context, c *pglease.Client, fs *flagSet, _ string) int {
	if err := admin.Migrate(ctx, c); err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "lease table %s is ready\n", tableName(fs.str("table")))
	return exitOK
}

func (e *env) cmdSchema(args []string) int {
	fs, code, done := e.parse("schema", args)
	if done {
		return code
	}
	if err := noArgs(fs); err != nil {
		return e.usage("schema", err)
	}
	ddl, err := admin.DDL(fs.str("table"))
	if err != nil {
		return e.usage("schema", checkTable(fs.str("table")))
	}
	jobs, err := pgleasecron.DDL(fs.str("table"))
	if err != nil {
		return e.usage("schema", checkTable(fs.str("table")))
	}
	fmt.Fprintln(e.stdout, strings.TrimRight(ddl, "\n"))
	fmt.Fprintln(e.stdout, "\n-- The tables of scheduled jobs (pglease cron, package pgleasecron), created")
	fmt.Fprintln(e.stdout, "-- when first needed as the lease table is; leave them out if you schedule no jobs.")
	fmt.Fprintln(e.stdout, strings.TrimRight(jobs, "\n"))
	return exitOK
}

func (e *env) cmdCleanup(ctx context.Context, args []string) int {
	return e.runAdmin(ctx, adminCommand{name: "cleanup", run: e.cleanup}, args)
}

func (e *env) cleanup(ctx context.Context, c *pglease.Client, fs *flagSet, _ string) int {
	n, err := admin.Cleanup(ctx, c)
	if errors.Is(err, pglease.ErrNoTable) {
		return e.noTable(fs, "there are no expired leases to delete")
	}
	if err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "deleted %d expired lease(s)\n", n)
	return exitOK
}

func tableName(t string) string {
	if t == "" {
		return "pglease_leases"
	}
	return t
}

// display makes a name safe for a terminal: control characters, invalid
// UTF-8 and quotes are escaped (the whole value is then quoted), and
// values longer than limit runes are shortened with "…".
func display(s string, limit int) string {
	safe := true
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || r == '"' {
			safe = false
			break
		}
	}
	if !safe {
		s = strconv.Quote(s)
	}
	if r := []rune(s); len(r) > limit {
		s = string(r[:limit-1]) + "…"
	}
	return s
}
