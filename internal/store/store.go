// Package store holds every SQL statement of pglease and runs them through a
// small driver-neutral interface, so the same code serves pgx pools, single
// pgx connections and database/sql handles.
package store

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

//go:embed queries.sql
var queriesSQL string

//go:embed functions.sql
var functionsSQL string

//go:embed session.sql
var sessionSQL string

// SchemaVersion is the version of the table layout this package writes and
// expects. It is recorded in the table's comment. (Version 5 changed what
// binds a session-bound row, not the layout; version 6 added the
// acquisition and release functions, version 7 the owner of a waiter,
// version 8 shared leases, version 9 the fence against earlier releases'
// acquisitions, version 10 the kind and weight of a row (quotas), version
// 11 the client of a shared holder in a refusal, whose doorbell its
// release rings, version 12 a release that rings the doorbell itself and a
// queued waiter's first path: see UpgradeTable, CreateAcquire and
// CreateRelease.)
const SchemaVersion = 12

// FencedBefore is the oldest schema version whose clients' own
// statements the fence lets write (see CreateFence): version 12 changed
// no rule of what an acquisition writes, so the clients of version 11
// keep acquiring sets through a rolling upgrade to it.
const FencedBefore = 11

// DefaultTable is the lease table used when none is configured.
const DefaultTable = "pglease_leases"

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidIdentifier reports whether s may be used as a table, schema or channel
// name: it must match [a-z_][a-z0-9_]{0,62}.
func ValidIdentifier(s string) bool { return identRE.MatchString(s) }

// quote returns s as a quoted SQL identifier. s has been validated, so the
// quoting is belt and braces.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Names are the database objects one lease table uses.
type Names struct {
	Schema          string // "" means the first schema on the search_path
	Table           string
	Seq             string // token sequence, in the same schema as the table
	Waiters         string // queue of blocked waiters, in the same schema
	SemaphoreIndex  string // index of the slot rows by semaphore
	Channel         string // LISTEN/NOTIFY channel
	AcquireFunc     string // the acquisition function (functions.sql), in the table's schema
	ReleaseFunc     string // the release function
	SharedFunc      string // the shared acquisition function
	FenceFunc       string // the trigger function that fences out earlier releases (CreateFence)
	Incarnation     string // the unlogged table of the server incarnation's id (CreateIncarnation)
	IncarnationFunc string // the function that names the server incarnation
}

// ParseTable splits "[schema.]table" and derives the sequence and channel
// names. It returns an error naming the offending part when an identifier is
// invalid.
func ParseTable(spec string) (Names, error) {
	if spec == "" {
		spec = DefaultTable
	}
	var n Names
	parts := strings.Split(spec, ".")
	switch len(parts) {
	case 1:
		n.Table = parts[0]
	case 2:
		n.Schema, n.Table = parts[0], parts[1]
		if !ValidIdentifier(n.Schema) {
			return Names{}, fmt.Errorf("schema name %q must match [a-z_][a-z0-9_]{0,62}", n.Schema)
		}
	default:
		return Names{}, fmt.Errorf("table %q must be TABLE or SCHEMA.TABLE", spec)
	}
	if !ValidIdentifier(n.Table) {
		return Names{}, fmt.Errorf("table name %q must match [a-z_][a-z0-9_]{0,62}", n.Table)
	}
	n.Seq = derived(n.Table, "_token_seq")
	n.Waiters = derived(n.Table, "_waiters")
	n.SemaphoreIndex = derived(n.Table, "_semaphore_idx")
	n.AcquireFunc = derived(n.Table, "_acquire")
	n.ReleaseFunc = derived(n.Table, "_release")
	n.SharedFunc = derived(n.Table, "_acquire_shared")
	n.FenceFunc = derived(n.Table, "_fence")
	n.Incarnation = derived(n.Table, "_incarnation")
	n.IncarnationFunc = derived(n.Table, "_server")
	n.Channel = n.Table
	return n, nil
}

// derived appends suffix to base, keeping the result within PostgreSQL's
// 63-byte identifier limit; long bases are shortened and made unique by a
// hash of the full base.
func derived(base, suffix string) string {
	if len(base)+len(suffix) <= 63 {
		return base + suffix
	}
	h := uint32(2166136261)
	for i := 0; i < len(base); i++ {
		h ^= uint32(base[i])
		h *= 16777619
	}
	tag := fmt.Sprintf("_%08x", h)
	return base[:63-len(suffix)-len(tag)] + tag + suffix
}

// qualified returns the quoted, schema-qualified form of an object name.
func (n Names) qualified(obj string) string {
	if n.Schema == "" {
		return quote(obj)
	}
	return quote(n.Schema) + "." + quote(obj)
}

// QuotedSchema is the schema's name as to_regnamespace reads it, or "".
func (n Names) QuotedSchema() string {
	if n.Schema == "" {
		return ""
	}
	return quote(n.Schema)
}

// QualifiedTable is the table's name as to_regclass reads it.
func (n Names) QualifiedTable() string { return n.qualified(n.Table) }

// QualifiedSeq is the sequence's name as to_regclass and nextval read it.
func (n Names) QualifiedSeq() string { return n.qualified(n.Seq) }

// QualifiedWaiters is the waiters table's name as to_regclass reads it.
func (n Names) QualifiedWaiters() string { return n.qualified(n.Waiters) }

// AcquireProcedure is the acquisition function as to_regprocedure reads it.
func (n Names) AcquireProcedure() string { return n.qualified(n.AcquireFunc) + acquireParams.types() }

// ReleaseProcedure is the release function as to_regprocedure reads it.
func (n Names) ReleaseProcedure() string { return n.qualified(n.ReleaseFunc) + releaseParams.types() }

// SharedProcedure is the shared acquisition function as to_regprocedure
// reads it.
func (n Names) SharedProcedure() string { return n.qualified(n.SharedFunc) + sharedParams.types() }

// CompatProcedures are the acquisition functions by the signatures of
// schema versions 7 to 9 (CreateAcquireCompat, CreateAcquireSharedCompat)
// as to_regprocedure reads them.
func (n Names) CompatProcedures() (acquire, shared string) {
	return n.qualified(n.AcquireFunc) + acquireParamsV9.types(), n.qualified(n.SharedFunc) + sharedParamsV9.types()
}

// ReleaseCompatProcedure is the release function by the signature of
// schema versions 6 to 11 (CreateReleaseCompat) as to_regprocedure reads
// it.
func (n Names) ReleaseCompatProcedure() string {
	return n.qualified(n.ReleaseFunc) + releaseParamsV11.types()
}

// FenceProcedure is the fence's trigger function as to_regprocedure reads
// it.
func (n Names) FenceProcedure() string { return n.qualified(n.FenceFunc) + "()" }

// QualifiedIncarnation is the incarnation table's name as to_regclass
// reads it.
func (n Names) QualifiedIncarnation() string { return n.qualified(n.Incarnation) }

// IncarnationProcedure is the incarnation function as to_regprocedure reads
// it.
func (n Names) IncarnationProcedure() string { return n.qualified(n.IncarnationFunc) + "()" }

// ListenSQL is the LISTEN statement for channel.
func ListenSQL(channel string) string { return "LISTEN " + quote(channel) }

// ClientChannel is the notification channel of one client: a release
// wakes the first queued waiter on it alone.
func ClientChannel(client string) string { return "pglease_" + client }

// StepDownChannel is the notification channel on which a client hears
// step-down requests for the leases it holds (see RequestStepDown); the
// payload is the lease's token and name, separated by a space.
func StepDownChannel(client string) string { return "pglease_" + client + "_stepdown" }

// Queries is the SQL text of every statement, with identifiers filled in.
type Queries struct {
	CreateSchema, CreateSequence, CreateTable, CommentTable      string
	CreateWaiters, Unqueue, Ahead, ClientLock, SessionLock       string
	UpgradeWaiters, Waiters                                      string
	CreateSemaphoreIndex, RequestStepDown, StepDownsRequested    string
	SchemaLock, TableExists, Columns, SchemaVersion              string
	LockNamespace, UpgradeTable, TokenState, LockTable           string
	RepairSequence, CreateAcquire, CreateRelease                 string
	CreateAcquireShared, AcquireShared                           string
	CreateFence, CreateFenceTrigger                              string
	CreateIncarnation, CreateIncarnationFunction                 string
	CreateAcquireCompat, CreateAcquireSharedCompat               string
	CreateReleaseCompat                                          string
	BackfillKind                                                 string
	Acquire, Renew, Release, Guard                               string
	Get, List, ForceRelease, Cleanup, Listen                     string
	Orphans                                                      string
	SessionKeepalive, AwaitSession                               string
	Ring, ProbeBell, AwaitBell, AwaitHeldBell, EndEarlierSession string
	WatchBounds                                                  string
	BackendPID, SessionSettings, BatchStatementTimeout           string
	AcquireAllLocks, AcquireAll                                  string // multi.go
	RefuseNewer, SequenceShape                                   string // schema.go
	MigrationLockTimeout, MigrationBlockers                      string
	SeedSequence                                                 string
}

// fragments are the parts of statements that queries.sql names like
// statements and other statements splice in, by placeholder.
// (Those that take arguments are macros: see fragmentMacros.)
var fragments = map[string]string{"Record": "{{record}}", "First": "{{first}}", "Durable": "{{durable}}", "NewPlainRow": "{{new_plain_row}}"}

// render returns a function that renders one statement of the embedded
// files (queries.sql, functions.sql, session.sql) for the given names.
func render(n Names) func(name string) string {
	stmts := statements()
	var pairs []string
	for name, placeholder := range fragments {
		pairs = append(pairs, placeholder, stmts[name])
	}
	splice := strings.NewReplacer(pairs...) // first, so fragments get identifiers too
	macros := sqlMacros(stmts)              // then the macros, whose text gets them too
	r := strings.NewReplacer(append(signatures,
		"{{table}}", n.QualifiedTable(),
		// nextval takes the sequence as text; quote it once more as a literal.
		"'{{seq}}'", "'"+strings.ReplaceAll(n.QualifiedSeq(), "'", "''")+"'",
		"{{seq}}", n.QualifiedSeq(),
		"{{waiters}}", n.QualifiedWaiters(),
		"{{semaphore_index}}", quote(n.SemaphoreIndex),
		"{{acquire_fn}}", n.qualified(n.AcquireFunc),
		"{{release_fn}}", n.qualified(n.ReleaseFunc),
		"{{acquire_shared_fn}}", n.qualified(n.SharedFunc),
		"{{fence_fn}}", n.qualified(n.FenceFunc),
		"{{version}}", strconv.Itoa(SchemaVersion),
		"{{fence_writers}}", fenceWriters(), "{{fence_since}}", strconv.Itoa(FencedBefore),
		"{{schema}}", quote(n.Schema),
		"{{channel}}", quote(n.Channel),
		"{{server}}", n.qualified(n.IncarnationFunc)+"()",
		"{{incarnation_fn}}", n.qualified(n.IncarnationFunc),
		"{{incarnation}}", n.qualified(n.Incarnation),
		"{{definer_options}}", definerOptions(n),
		"{{fn_options}}", functionOptions(n),
	)...)
	return func(name string) string {
		s, ok := stmts[name]
		if !ok {
			panic("store: the SQL files lack statement " + name) // a build defect, caught by tests
		}
		return r.Replace(expand(splice.Replace(s), macros))
	}
}

// functionOptions are the options of the functions (functions.sql) of a
// table: an unqualified table's search_path as of their creation (the
// exported DDL's case; EnsureSchema creates them for the schema it
// resolved, see functionsIn).
func functionOptions(n Names) string {
	if n.Schema == "" {
		return "SET search_path FROM CURRENT "
	}
	return ""
}

// definerOptions are those of a SECURITY DEFINER function: the exported
// DDL's search_path of an unqualified table, as functionOptions; otherwise
// one in which no other role's objects come first (its body names every
// object of ours with the schema).
func definerOptions(n Names) string {
	if n.Schema == "" {
		return functionOptions(n)
	}
	return "SET search_path = pg_catalog, pg_temp "
}

// Build renders the statements for the given names.
func Build(n Names) Queries {
	get := render(n)
	return Queries{
		CreateSchema: get("CreateSchema"), CreateSequence: get("CreateSequence"),
		CreateTable: get("CreateTable"), CommentTable: get("CommentTable"),
		CreateWaiters: get("CreateWaiters"), CreateSemaphoreIndex: get("CreateSemaphoreIndex"), RequestStepDown: get("RequestStepDown"), StepDownsRequested: get("StepDownsRequested"), Unqueue: get("Unqueue"), Ahead: get("Ahead"), UpgradeWaiters: get("UpgradeWaiters"), Waiters: get("Waiters"), ClientLock: get("ClientLock"), SessionLock: get("SessionLock"),
		SchemaLock: get("SchemaLock"), TableExists: get("TableExists"),
		Columns: get("Columns"), SchemaVersion: get("SchemaVersion"),
		LockNamespace: get("LockNamespace"), UpgradeTable: get("UpgradeTable"),
		TokenState: get("TokenState"), LockTable: get("LockTable"), RepairSequence: get("RepairSequence"), SeedSequence: get("SeedSequence"),
		CreateAcquire: get("CreateAcquire"), CreateRelease: get("CreateRelease"),
		CreateAcquireShared: get("CreateAcquireShared"), AcquireShared: get("AcquireShared"),
		CreateFence: get("CreateFence"), CreateFenceTrigger: get("CreateFenceTrigger"),
		CreateIncarnation: get("CreateIncarnation"), CreateIncarnationFunction: get("CreateIncarnationFunction"),
		CreateAcquireCompat: get("CreateAcquireCompat"), CreateAcquireSharedCompat: get("CreateAcquireSharedCompat"),
		CreateReleaseCompat: get("CreateReleaseCompat"),
		BackfillKind:        get("BackfillKind"),
		Acquire:             get("Acquire"), Renew: get("Renew"),
		Release: get("Release"), Guard: get("Guard"), Get: get("Get"), List: get("List"),
		ForceRelease: get("ForceRelease"), Cleanup: get("Cleanup"), Listen: get("Listen"),
		Orphans:          get("Orphans"),
		SessionKeepalive: get("SessionKeepalive"), AwaitSession: get("AwaitSession"),
		Ring: get("Ring"), ProbeBell: get("ProbeBell"), AwaitBell: get("AwaitBell"), AwaitHeldBell: get("AwaitHeldBell"), WatchBounds: get("WatchBounds"),
		EndEarlierSession: get("EndEarlierSession"),
		BackendPID:        get("BackendPID"), SessionSettings: get("SessionSettings"),
		BatchStatementTimeout: get("BatchStatementTimeout"),
		AcquireAllLocks:       get("AcquireAllLocks"), AcquireAll: get("AcquireAll"),
		RefuseNewer: get("RefuseNewer"), SequenceShape: get("SequenceShape"),
		MigrationLockTimeout: get("MigrationLockTimeout"), MigrationBlockers: get("MigrationBlockers"),
	}
}

// statements are the statements of the embedded files, by name.
func statements() map[string]string {
	stmts := parse(queriesSQL)
	for _, file := range []string{functionsSQL, sessionSQL} {
		for name, text := range parse(file) {
			if _, dup := stmts[name]; dup {
				panic("store: statement " + name + " is defined twice") // a build defect, caught by tests
			}
			stmts[name] = text
		}
	}
	return stmts
}

// parse splits an embedded file on "-- name: X" lines. Comment lines are
// kept out of the statements.
func parse(src string) map[string]string {
	out := map[string]string{}
	var name string
	var b strings.Builder
	flush := func() {
		if name != "" {
			out[name] = strings.TrimSpace(b.String())
		}
		b.Reset()
	}
	for _, line := range strings.Split(src, "\n") {
		if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
			flush()
			name = strings.TrimSpace(rest)
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	flush()
	return out
}

// fenceWriters is the versions the fence lets write, from FencedBefore to
// SchemaVersion, as a list of SQL text literals: '11', '12'.
func fenceWriters() string {
	var vs []string
	for v := FencedBefore; v <= SchemaVersion; v++ {
		vs = append(vs, "'"+strconv.Itoa(v)+"'")
	}
	return strings.Join(vs, ", ")
}
