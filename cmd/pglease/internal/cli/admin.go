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
	fmt.Fprintf(e.stderr, "pglease: there is no lease table %s in this database, so %s; nothing was created or changed.\n", t, what)
	if fs.isSet("table") {
		fmt.Fprintf(e.stderr, "pglease: check the spelling of --table %s: it must name the table your jobs use ('pglease ls --table [SCHEMA.]TABLE' lists a table's leases).\n", t)
	} else {
		fmt.Fprintln(e.stderr, "pglease: if your jobs use another table, name it with --table [SCHEMA.]TABLE ('pglease ls --table [SCHEMA.]TABLE' lists a table's leases).")
	}
	return exitError
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
	if len(infos) == 0 {
		fmt.Fprintln(e.stdout, "no leases")
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

func (e *env) status(ctx context.Context, c *pglease.Client, fs *flagSet, name string) int {
	in, err := c.Get(ctx, name)
	switch {
	case errors.Is(err, pglease.ErrNoLease):
		if fs.boolean("json") {
			e.printJSON(map[string]any{"name": name, "state": "free"})
		} else {
			fmt.Fprintf(e.stdout, "%s is free\n", display(name, 255))
		}
		return exitFree
	case err != nil:
		return e.fail(err)
	}
	queues, err := e.queuesOf(ctx, c, queue.Of(in))
	if err != nil {
		return e.fail(err)
	}
	if fs.boolean("json") {
		e.printJSON(toJSON(in, queues))
	} else {
		e.printTable([]pglease.Info{in}, queues)
	}
	if in.Remaining <= 0 {
		return exitFree
	}
	return exitOK
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
