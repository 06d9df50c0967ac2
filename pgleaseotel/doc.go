// Package pgleaseotel reports pglease events to OpenTelemetry: metrics,
// spans for acquisitions, leases and releases, and a log handler that puts
// the caller's trace id on the library's log records. It is a module of its
// own so that users of pglease who do not use OpenTelemetry never download
// it.
//
//	obs, err := pgleaseotel.New(pgleaseotel.Options{}) // the global providers
//	if err != nil { … }
//	client, err := pglease.Open(ctx, dsn, pglease.Config{
//		Observer: obs,
//		Logger:   slog.New(pgleaseotel.LogHandler(slog.NewJSONHandler(os.Stderr, nil))),
//	})
//
// # Metrics
//
// Instruments of the meter named [ScopeName]; durations are in seconds:
//
//   - pglease.events (counter, {event}): every event, by
//     pglease.event.kind ("acquired", "renewed", "lost"…).
//   - pglease.leases.held (gauge, {lease}): leases held, computed from each
//     client's acquisitions and ends and replaced by the state an
//     [pglease.EventDropped] carries, so it never drifts.
//   - pglease.release.errors (counter, {error}): releases whose row could
//     not be deleted (the lease ended all the same; the row expires).
//   - pglease.events.dropped (counter, {event}): events the client dropped
//     because the observer fell behind.
//   - pglease.renew.duration (histogram, s): round trip of each successful
//     renewal statement, one per statement however many leases it renewed.
//   - pglease.acquire.wait (histogram, s): from an acquisition call to the
//     acquisition.
//   - pglease.lease.hold (histogram, s): how long leases were held, by
//     pglease.event.kind "released" or "lost".
//   - pglease.elector.leader (gauge, {term}): per elector name
//     (pglease.lease.name), 1 while an elector of this process is in a
//     term, else 0 (also while it campaigns without leading).
//
// [ObserveQueues] adds two gauges of who waits in a lease table, read from
// the table at each collection, so that they cover the whole fleet:
// pglease.waiters ({waiter}) and pglease.wait.oldest (s), with the
// attribute pglease.table.
//
// With [Options].NameAttribute the lease name (pglease.lease.name) is an
// attribute of the events counter, the held gauge and the wait and hold
// histograms. Leave it off when names are unbounded (one per job id, say):
// every name is a time series of its own, kept for the life of the process.
// Elector names are always an attribute of pglease.elector.leader: they
// name roles, a fixed set.
//
// # Spans
//
// Spans come from the tracer named [ScopeName]. Events arrive after the
// fact, on the client's event goroutine, so each span is timed from the
// durations the event carries and ended at its delivery:
//
//   - pglease.acquire, per [pglease.EventAcquired]: from the call to the
//     acquisition (the event's Wait), a child of the span in the context
//     passed to Acquire.
//   - pglease.lease, the lease's lifetime: a child of its pglease.acquire
//     span, from the acquisition to its [pglease.EventReleased] or
//     [pglease.EventLost]. Its status is Error, with the cause, when the
//     lease was lost or its row could not be deleted; a stale lease taken
//     over (an EventAcquired with Previous) adds an event
//     "pglease.stale_reclaimed" naming the previous owner.
//   - pglease.release, per [pglease.EventReleased]: the time taken to delete
//     the row (the event's Latency), a child of the span in the context
//     passed to Release (of the lease span when that context has none),
//     linked to the lease span; status Error when the row could not be
//     deleted.
//
// When a client drops events, the [pglease.EventDropped] that follows names
// the leases it still holds; the lease spans of the others end there with
// status unset and the attribute pglease.lease.end_inferred = true, so that
// no span stays open forever (a client holds a name once at a time, so a
// new acquisition of a name ends an open span of that name likewise). Contention, alerts and renewals are counted,
// not traced: the caller's span may have ended by the time they arrive.
//
// # Logs
//
// The library logs with the context of the call that caused the record
// (slog's context methods), so a trace-aware handler sees the caller's span.
// [LogHandler] wraps any handler to add trace_id and span_id attributes.
package pgleaseotel
