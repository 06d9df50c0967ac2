package store

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The parameters of the server-side functions (functions.sql), each
// written once, here: their names, SQL types and order render the
// signature in CREATE FUNCTION ({{acquire_params}} and its siblings), the
// call in named notation (queries.sql's {{acquire_call}}: p_name =>
// $1::text, …), the argument types by which the catalog tells the function
// from others of its name (AcquireProcedure), and the call's bind values;
// the result columns, likewise, render the OUT parameters and give the
// scan of the row.
//
// A change of a function's parameters is a new schema version: CREATE OR
// REPLACE cannot change them (see functions.sql), and tables created
// earlier keep the old function until they are upgraded.

// param is one parameter of a function: its name, its SQL type as the
// server prints it (pg_get_function_arguments), and its value in a call.
type param[C any] struct {
	name, typ string
	value     func(C) any
}

// signature is the parameters of a function, in order (its result
// columns, the OUT parameters, are an outParams).
type signature[C any] []param[C]

// decl is the parameter list of CREATE FUNCTION, wrapped and indented as
// the statement is; the result columns (OUT parameters) follow it.
func (s signature[C]) decl() string {
	items := make([]string, len(s))
	for i, p := range s {
		items[i] = p.name + " " + p.typ + ","
	}
	return wrap(items)
}

// call is the argument list of a call in named notation, each argument a
// bind parameter cast to the parameter's type: p_name => $1::text, ….
func (s signature[C]) call() string {
	parts := make([]string, len(s))
	for i, p := range s {
		parts[i] = p.name + " => $" + strconv.Itoa(i+1) + "::" + p.typ
	}
	return strings.Join(parts, ", ")
}

// types is the argument types as to_regprocedure reads them: (text, …).
func (s signature[C]) types() string {
	parts := make([]string, len(s))
	for i, p := range s {
		parts[i] = p.typ
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// identity is the parameters as pg_get_function_arguments prints them
// before the result columns: p_name text, ….
func (s signature[C]) identity() string {
	parts := make([]string, len(s))
	for i, p := range s {
		parts[i] = p.name + " " + p.typ
	}
	return strings.Join(parts, ", ")
}

// args is the bind values of a call, in order.
func (s signature[C]) args(c C) []any {
	out := make([]any, len(s))
	for i, p := range s {
		out[i] = p.value(c)
	}
	return out
}

// acquireCall is what a call of the acquisition function binds: the
// attempt, its metadata ("{}" when none) and the lock namespace.
type acquireCall struct {
	AcquireArgs
	meta, ns string
}

// acquireParams are CreateAcquire's parameters (see functions.sql for
// their meaning).
var acquireParams = signature[acquireCall]{
	{"p_name", "text", func(c acquireCall) any { return c.Name }},
	{"p_owner", "text", func(c acquireCall) any { return c.Owner }},
	{"p_ttl_ms", "bigint", func(c acquireCall) any { return c.TTL.Milliseconds() }},
	{"p_hold_ms", "bigint", func(c acquireCall) any { return c.MinHold.Milliseconds() }},
	{"p_session", "boolean", func(c acquireCall) any { return c.Session }},
	{"p_metadata", "jsonb", func(c acquireCall) any { return c.meta }},
	{"p_ns", "text", func(c acquireCall) any { return c.ns }},
	{"p_client", "text", func(c acquireCall) any { return c.Client }},
	{"p_lock_timeout_ms", "integer", func(c acquireCall) any { return c.LockTimeout.Milliseconds() }},
	{"p_queued", "boolean", func(c acquireCall) any { return c.Queued }},
	{"p_queue_ttl_ms", "bigint", func(c acquireCall) any { return c.QueueTTL.Milliseconds() }},
	{"p_fair_ms", "bigint", func(c acquireCall) any { return c.FairAfter.Milliseconds() }},
	{"p_in_batch", "boolean", func(c acquireCall) any { return c.inBatch }},
	{"p_semaphore", "text", func(c acquireCall) any { return orNull(c.Semaphore != "", c.Semaphore) }}, // NULL for a plain lease
	{"p_slots", "integer", func(c acquireCall) any { return orNull(c.Semaphore != "", c.Slots) }},
	{"p_kind", "text", func(c acquireCall) any { return c.kind() }},
}

// sharedCall is what a call of the shared acquisition function binds:
// the attempt, its metadata, the lock namespace and the client's rows of
// the name (a JSON array).
type sharedCall struct {
	SharedArgs
	meta, ns, mine string
}

// sharedParams are CreateAcquireShared's parameters.
var sharedParams = signature[sharedCall]{
	{"p_name", "text", func(c sharedCall) any { return c.Name }},
	{"p_owner", "text", func(c sharedCall) any { return c.Owner }},
	{"p_ttl_ms", "bigint", func(c sharedCall) any { return c.TTL.Milliseconds() }},
	{"p_hold_ms", "bigint", func(c sharedCall) any { return c.MinHold.Milliseconds() }},
	{"p_session", "boolean", func(c sharedCall) any { return c.Session }},
	{"p_metadata", "jsonb", func(c sharedCall) any { return c.meta }},
	{"p_ns", "text", func(c sharedCall) any { return c.ns }},
	{"p_client", "text", func(c sharedCall) any { return c.Client }},
	{"p_lock_timeout_ms", "integer", func(c sharedCall) any { return c.LockTimeout.Milliseconds() }},
	{"p_queued", "boolean", func(c sharedCall) any { return c.Queued }},
	{"p_queue_ttl_ms", "bigint", func(c sharedCall) any { return c.QueueTTL.Milliseconds() }},
	{"p_in_batch", "boolean", func(c sharedCall) any { return c.inBatch }},
	{"p_mine", "jsonb", func(c sharedCall) any { return c.mine }},
	{"p_kind", "text", func(c sharedCall) any { return c.kind() }},
	{"p_weight", "integer", func(c sharedCall) any { return max(c.Weight, 1) }},
	{"p_capacity", "integer", func(c sharedCall) any { return c.Capacity }},
}

// kind is the kind of lease the call asks for: a shared lease unless it
// says otherwise.
func (c sharedCall) kind() string {
	if c.Kind == "" {
		return RowShared
	}
	return c.Kind
}

// releaseCall is what a call of the release function binds.
type releaseCall struct {
	name      string
	token     int64
	channel   string // the table's notification channel
	ns        string
	fairAfter int64  // ms
	client    string // the releasing client's id
	bell      int    // the bell the calling session holds, or -1
}

// releaseParams are CreateRelease's parameters.
var releaseParams = signature[releaseCall]{
	{"p_name", "text", func(c releaseCall) any { return c.name }},
	{"p_token", "bigint", func(c releaseCall) any { return c.token }},
	{"p_channel", "text", func(c releaseCall) any { return c.channel }},
	{"p_ns", "text", func(c releaseCall) any { return c.ns }},
	{"p_fair_ms", "bigint", func(c releaseCall) any { return c.fairAfter }},
	{"p_client", "text", func(c releaseCall) any { return c.client }},
	{"p_bell", "integer", func(c releaseCall) any { return c.bell }},
}

// releaseParamsV11 is the release function's signature of schema versions
// 6 to 11, which CreateReleaseCompat keeps for the clients of those
// releases (TestCompatSignaturesAreVersion9s checks it against version
// 9's, which is the same).
var releaseParamsV11 = releaseParams.without("p_client", "p_bell")

// outParam is one result column of a function (an OUT parameter): its name,
// its SQL type, and where a scan of the row puts its value.
type outParam[R any] struct {
	name, typ string
	dest      func(*R) any
}

// outParams is the result columns of a function, in order.
type outParams[R any] []outParam[R]

// decl is the list of OUT parameters of CREATE FUNCTION, ending its
// parameter list.
func (cs outParams[R]) decl() string {
	items := make([]string, len(cs))
	for i, c := range cs {
		items[i] = "OUT " + c.name + " " + c.typ + ","
	}
	items[len(items)-1] = strings.TrimSuffix(items[len(items)-1], ",")
	return wrap(items)
}

// identity is the result columns as pg_get_function_arguments prints them
// after the parameters: OUT o_acquired boolean, ….
func (cs outParams[R]) identity() string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = "OUT " + c.name + " " + c.typ
	}
	return strings.Join(parts, ", ")
}

// dest is the scan destinations of a row into r, in column order.
func (cs outParams[R]) dest(r *R) []any {
	out := make([]any, len(cs))
	for i, c := range cs {
		out[i] = c.dest(r)
	}
	return out
}

// acquireRow is the row an acquisition function returns, as scanned.
type acquireRow struct {
	r           AcquireResult
	remMS, hbMS int64
	sess        bool   // o_session_bound: the new row's, or the holder's
	name        string // o_name: the row a shared acquisition wrote
	holders     []byte // o_holders: a quota's session-bound holders (JSON)
}

// result is the outcome the row describes.
func (x *acquireRow) result() AcquireResult {
	r := x.r
	r.OtherRemaining = time.Duration(x.remMS) * time.Millisecond
	r.OtherHeartbeatAge = time.Duration(x.hbMS) * time.Millisecond
	if r.Acquired {
		r.SessionBound = x.sess
	} else {
		r.HolderInSession = x.sess
	}
	if len(x.holders) > 2 { // not "{}"
		_ = json.Unmarshal(x.holders, &r.Holders) // the server's jsonb_object_agg: rows to pids
	}
	return r
}

// acquireColumns are the result columns of CreateAcquire, which
// CreateAcquireShared's begin with (see functions.sql for their meaning).
var acquireColumns = outParams[acquireRow]{
	{"o_acquired", "boolean", func(x *acquireRow) any { return &x.r.Acquired }},
	{"o_token", "bigint", func(x *acquireRow) any { return &x.r.Token }},
	{"o_session_bound", "boolean", func(x *acquireRow) any { return &x.sess }},
	{"o_owner", "text", func(x *acquireRow) any { return &x.r.OtherOwner }},
	{"o_other_token", "bigint", func(x *acquireRow) any { return &x.r.OtherToken }},
	{"o_remaining_ms", "bigint", func(x *acquireRow) any { return &x.remMS }},
	{"o_heartbeat_ms", "bigint", func(x *acquireRow) any { return &x.hbMS }},
	{"o_client", "text", func(x *acquireRow) any { return &x.r.OtherClient }},
	{"o_watchable", "boolean", func(x *acquireRow) any { return &x.r.HolderWatchable }},
	{"o_ahead", "bigint", func(x *acquireRow) any { return &x.r.Ahead }},
	{"o_clash_kind", "text", func(x *acquireRow) any { return &x.r.Clash.Kind }},
	{"o_clash_size", "integer", func(x *acquireRow) any { return &x.r.Clash.Size }},
	{"o_pid", "integer", func(x *acquireRow) any { return &x.r.HolderSession }},
}

// sharedColumns are the result columns of CreateAcquireShared:
// CreateAcquire's, the row written, and a quota's session-bound holders.
var sharedColumns = append(acquireColumns[:len(acquireColumns):len(acquireColumns)],
	outParam[acquireRow]{"o_name", "text", func(x *acquireRow) any { return &x.name }},
	outParam[acquireRow]{"o_holders", "jsonb", func(x *acquireRow) any { return &x.holders }})

// releaseRow is the row of the release function.
type releaseRow struct {
	released, notified, nowait int64
	rang                       bool
}

// releaseColumns are the result columns of CreateRelease.
var releaseColumns = outParams[releaseRow]{
	{"o_released", "bigint", func(x *releaseRow) any { return &x.released }},
	{"o_notified", "bigint", func(x *releaseRow) any { return &x.notified }},
	{"o_nowait", "bigint", func(x *releaseRow) any { return &x.nowait }},
	{"o_rang", "boolean", func(x *releaseRow) any { return &x.rang }},
}

// releaseColumnsV11 are the result columns of the release function of
// schema versions 6 to 11 (CreateReleaseCompat).
var releaseColumnsV11 = releaseColumns.without("o_rang")

// without is the result columns less those named names.
func (cs outParams[R]) without(names ...string) outParams[R] {
	return dropNamed(cs, func(c outParam[R]) string { return c.name }, names)
}

// dropNamed is xs less the items whose name is among names, in order.
func dropNamed[S ~[]T, T any](xs S, name func(T) string, names []string) S {
	var out S
	for _, x := range xs {
		if !slices.Contains(names, name(x)) {
			out = append(out, x)
		}
	}
	return out
}

// The signatures of schema versions 7 to 9, which the clients of those
// releases still running during a rolling upgrade call (positionally, or
// in named notation): the parameters without p_kind (and, for the shared
// acquisition, p_weight and p_capacity), and the result with
// the kind of a clash as an int code (o_clash). The functions of those
// signatures are thin wrappers (CreateAcquireCompat,
// CreateAcquireSharedCompat) around this version's: PostgreSQL tells the
// two apart by their argument types. Derived from this version's, they
// must stay those of version 9 (TestCompatSignaturesAreVersion9s).
var (
	acquireParamsV9  = acquireParams.without("p_kind")
	sharedParamsV9   = sharedParams.without("p_kind", "p_weight", "p_capacity")
	acquireColumnsV9 = acquireColumns.v9()
	sharedColumnsV9  = sharedColumns.v9()
)

// without is the signature less the parameters named names.
func (s signature[C]) without(names ...string) signature[C] {
	return dropNamed(s, func(p param[C]) string { return p.name }, names)
}

// pass is the arguments of a call that passes a function's own
// parameters on by name: p_name => p_name, ….
func (s signature[C]) pass() string {
	parts := make([]string, len(s))
	for i, p := range s {
		parts[i] = p.name + " => " + p.name
	}
	return strings.Join(parts, ", ")
}

// v9 is the result columns as schema versions 7 to 9 return them: the
// clash's kind and size in one int code, o_clash, and no quota's holders.
func (cs outParams[R]) v9() outParams[R] {
	var out outParams[R]
	for _, c := range cs {
		switch c.name {
		case "o_clash_kind":
			out = append(out, outParam[R]{name: "o_clash", typ: "integer"})
		case "o_clash_size", "o_holders":
		default:
			out = append(out, c)
		}
	}
	return out
}

// compatSelect is the select list and the INTO list by which a wrapper of
// the older signature returns the row of this version's function (named
// a): every column as it is, but the clash, which it encodes as those
// versions did (see clashCode).
func (cs outParams[R]) compatSelect() (sel, into string) {
	var s, in []string
	for _, c := range cs {
		in = append(in, c.name)
		if c.name == "o_clash" {
			s = append(s, clashCode)
			continue
		}
		s = append(s, "a."+c.name)
	}
	return strings.Join(s, ", "), strings.Join(in, ", ")
}

// clashCode is the clash as schema versions 7 to 9 encoded it, for their
// clients: 0 none, 1 a plain lease, -1 shared leases, n the slot count of
// a semaphore.
const clashCode = `CASE a.o_clash_kind WHEN '' THEN 0 WHEN '` + RowPlain + `' THEN 1 WHEN '` + RowSemaphore + `' THEN a.o_clash_size ELSE -1 END`

// wrap joins items with spaces into lines of at most 88 characters,
// indented by four.
func wrap(items []string) string {
	var b strings.Builder
	line := 4
	b.WriteString("    ")
	for i, item := range items {
		if line+len(item)+1 > 88 {
			b.WriteString("\n    ")
			line = 4
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		}
		b.WriteString(item)
		line += len(item)
	}
	return b.String()
}

// orNull is v when ok, else nil (SQL NULL).
func orNull(ok bool, v any) any {
	if ok {
		return v
	}
	return nil
}

// signatures are the placeholders the signatures fill in the embedded
// files: the parameter lists of CREATE FUNCTION (parameters, then result
// columns) and of the calls.
var signatures = []string{
	"{{acquire_params}}", acquireParams.decl(), "{{acquire_call}}", acquireParams.call(),
	"{{acquire_shared_params}}", sharedParams.decl(), "{{acquire_shared_call}}", sharedParams.call(),
	"{{release_params}}", releaseParams.decl(), "{{release_call}}", releaseParams.call(),
	"{{acquire_result}}", acquireColumns.decl(), "{{acquire_shared_result}}", sharedColumns.decl(),
	"{{release_result}}", releaseColumns.decl(),
	"{{release_v11_params}}", releaseParamsV11.decl(), "{{release_v11_pass}}", releaseParamsV11.pass(),
	"{{release_v11_result}}", releaseColumnsV11.decl(),
	"{{release_v11_select}}", first(releaseColumnsV11.compatSelect()), "{{release_v11_into}}", second(releaseColumnsV11.compatSelect()),
	"{{acquire_v9_params}}", acquireParamsV9.decl(), "{{acquire_v9_result}}", acquireColumnsV9.decl(),
	"{{acquire_v9_pass}}", acquireParamsV9.pass(),
	"{{acquire_v9_select}}", first(acquireColumnsV9.compatSelect()), "{{acquire_v9_into}}", second(acquireColumnsV9.compatSelect()),
	"{{acquire_shared_v9_params}}", sharedParamsV9.decl(), "{{acquire_shared_v9_result}}", sharedColumnsV9.decl(),
	"{{acquire_shared_v9_pass}}", sharedParamsV9.pass(),
	"{{acquire_shared_v9_select}}", first(sharedColumnsV9.compatSelect()), "{{acquire_shared_v9_into}}", second(sharedColumnsV9.compatSelect()),
}

func first(a, _ string) string  { return a }
func second(_, b string) string { return b }
