package pgleaseotel

import (
	"context"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel/trace"
)

// Keys of the attributes [LogHandler] adds.
const (
	TraceIDKey = "trace_id"
	SpanIDKey  = "span_id"
)

// LogHandler returns a handler that passes each record to h with the ids
// of the span in the record's context, if any, as the top-level attributes
// trace_id and span_id (lowercase hex, as W3C trace context writes them),
// also under groups opened with WithGroup. pglease logs with the context
// of the call that caused the record, so a client whose Config.Logger is
// slog.New(LogHandler(h)) writes the caller's trace id on the warnings of
// its Acquire and Release calls; records of the client's background work
// carry none.
func LogHandler(h slog.Handler) slog.Handler { return &logHandler{inner: h} }

// logHandler adds the trace ids. Attributes given before the first group go
// to inner; from the first group on, groups and attributes are kept in ops
// and nested around the record's attributes in Handle, so that the ids stay
// at the top level.
type logHandler struct {
	inner slog.Handler
	ops   []groupOrAttrs
}

// groupOrAttrs is a WithGroup (group set) or a WithAttrs call.
type groupOrAttrs struct {
	group string
	attrs []slog.Attr
}

func (h *logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() && len(h.ops) == 0 {
		return h.inner.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	if sc.IsValid() {
		out.AddAttrs(slog.String(TraceIDKey, sc.TraceID().String()), slog.String(SpanIDKey, sc.SpanID().String()))
	}
	attrs := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	for _, op := range slices.Backward(h.ops) {
		if op.group != "" {
			attrs = []slog.Attr{{Key: op.group, Value: slog.GroupValue(attrs...)}}
		} else {
			attrs = append(slices.Clip(op.attrs), attrs...)
		}
	}
	out.AddAttrs(attrs...)
	return h.inner.Handle(ctx, out)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	if len(h.ops) == 0 {
		return &logHandler{inner: h.inner.WithAttrs(attrs)}
	}
	return &logHandler{inner: h.inner, ops: append(slices.Clip(h.ops), groupOrAttrs{attrs: attrs})}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &logHandler{inner: h.inner, ops: append(slices.Clip(h.ops), groupOrAttrs{group: name})}
}
