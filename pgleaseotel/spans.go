package pgleaseotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pglease/pglease"
)

// parent returns a context that carries the span context of ctx (nil:
// none) and nothing else: spans started from it have the caller's span as
// parent without keeping the caller's values or its cancellation.
func parent(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(ctx))
}

// leaseAttrs are the attributes that identify the lease of e.
func leaseAttrs(e pglease.Event, more ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{
		attrName.String(e.Name), attrToken.Int64(e.Token),
		attrOwner.String(e.Owner), attrClient.String(e.Client),
	}, more...)
}

// startLease records the acquire span of an EventAcquired delivered at now
// and starts and returns the lease span, its child.
func (o *Observer) startLease(e pglease.Event, now time.Time) trace.Span {
	ctx, acquire := o.tracer.Start(parent(e.Context), "pglease.acquire",
		trace.WithTimestamp(now.Add(-e.Wait)),
		trace.WithAttributes(leaseAttrs(e, attrWait.Float64(e.Wait.Seconds()))...))
	acquire.End(trace.WithTimestamp(now))
	_, lease := o.tracer.Start(ctx, "pglease.lease", trace.WithTimestamp(now),
		trace.WithAttributes(leaseAttrs(e)...))
	if e.Previous != "" { // it took an expired lease over
		lease.AddEvent("pglease.stale_reclaimed", trace.WithTimestamp(now),
			trace.WithAttributes(attrPrevious.String(e.Previous)))
	}
	return lease
}

// endLease records the release span of an EventReleased delivered at now
// and ends the lease span (nil: none is open) of an EventReleased or
// EventLost.
func (o *Observer) endLease(lease trace.Span, e pglease.Event, now time.Time) {
	if e.Kind == pglease.EventReleased {
		ctx := parent(e.Context)
		var opts []trace.SpanStartOption
		switch {
		case lease == nil:
		case trace.SpanContextFromContext(ctx).IsValid():
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: lease.SpanContext()}))
		default: // released without a span of the caller's: part of the lease's trace
			ctx = trace.ContextWithSpan(ctx, lease)
		}
		opts = append(opts, trace.WithTimestamp(now.Add(-e.Latency)),
			trace.WithAttributes(leaseAttrs(e, attrLatency.Float64(e.Latency.Seconds()))...))
		_, release := o.tracer.Start(ctx, "pglease.release", opts...)
		setError(release, e.Err, now)
		release.End(trace.WithTimestamp(now))
	}
	if lease == nil {
		return
	}
	lease.SetAttributes(attrHold.Float64(e.Hold.Seconds()))
	err := e.Err
	if e.Kind == pglease.EventLost && err == nil {
		err = errLost
	}
	setError(lease, err, now)
	lease.End(trace.WithTimestamp(now))
}

// endInferred ends lease spans whose ends were not reported (their events
// were dropped).
func endInferred(now time.Time, spans ...trace.Span) {
	for _, s := range spans {
		s.SetAttributes(attrInferred.Bool(true))
		s.End(trace.WithTimestamp(now))
	}
}

// errLost stands for the cause of a loss reported without one.
var errLost = errors.New("pglease: lease lost")

// setError records err on span and sets its status to Error; nil does
// nothing.
func setError(span trace.Span, err error, now time.Time) {
	if err == nil {
		return
	}
	span.RecordError(err, trace.WithTimestamp(now))
	span.SetStatus(codes.Error, err.Error())
}
