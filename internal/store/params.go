package store

import (
	"strconv"
	"strings"
)

// The parameters of the server-side functions (functions.sql), each
// written once, here: their names, SQL types and order render the
// signature in CREATE FUNCTION ({{acquire_params}} and its siblings), the
// call in named notation (queries.sql's {{acquire_call}}: p_name =>
// $1::text, …), the argument types by which the catalog tells the function
// from others of its name (AcquireProcedure), and the call's bind values.
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

// signature is the parameters of a function, in order (its OUT
// parameters, the result columns, are written in functions.sql).
type signature[C any] []param[C]

// decl is the parameter list of CREATE FUNCTION, wrapped and indented as
// the statement is.
func (s signature[C]) decl() string {
	var b strings.Builder
	line := 4
	b.WriteString("    ")
	for i, p := range s {
		item := p.name + " " + p.typ + ","
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

// identity is the parameters as pg_get_function_identity_arguments prints
// them: p_name text, ….
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
}

// releaseCall is what a call of the release function binds.
type releaseCall struct {
	name      string
	token     int64
	channel   string // the table's notification channel
	ns        string
	fairAfter int64 // ms
}

// releaseParams are CreateRelease's parameters.
var releaseParams = signature[releaseCall]{
	{"p_name", "text", func(c releaseCall) any { return c.name }},
	{"p_token", "bigint", func(c releaseCall) any { return c.token }},
	{"p_channel", "text", func(c releaseCall) any { return c.channel }},
	{"p_ns", "text", func(c releaseCall) any { return c.ns }},
	{"p_fair_ms", "bigint", func(c releaseCall) any { return c.fairAfter }},
}

// orNull is v when ok, else nil (SQL NULL).
func orNull(ok bool, v any) any {
	if ok {
		return v
	}
	return nil
}

// signatures are the placeholders the signatures fill in the embedded
// files: the parameter lists of CREATE FUNCTION and of the calls.
var signatures = []string{
	"{{acquire_params}}", acquireParams.decl(), "{{acquire_call}}", acquireParams.call(),
	"{{acquire_shared_params}}", sharedParams.decl(), "{{acquire_shared_call}}", sharedParams.call(),
	"{{release_params}}", releaseParams.decl(), "{{release_call}}", releaseParams.call(),
}
