package pgleaseotel_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/pglease/pglease/pgleaseotel"
)

// jsonLogger returns a JSON logger into buf without times, wrapped by
// LogHandler if wrap.
func jsonLogger(buf *bytes.Buffer, wrap bool) *slog.Logger {
	var h slog.Handler = slog.NewJSONHandler(buf, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	if wrap {
		h = pgleaseotel.LogHandler(h)
	}
	return slog.New(h)
}

// spanContext is a context carrying a fixed span context.
func spanContext() context.Context {
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	}))
}

// LogHandler adds the span's ids at the top level, also under groups, and
// leaves everything else as the wrapped handler writes it.
func TestLogHandler(t *testing.T) {
	log := func(l *slog.Logger, ctx context.Context) {
		l.InfoContext(ctx, "plain", "k", 1)
		l = l.With("a", 1)
		l.WarnContext(ctx, "with", "k", 2)
		l = l.WithGroup("g").With("b", 2).WithGroup("h")
		l.ErrorContext(ctx, "grouped", "c", 3)
		l.WithGroup("empty").InfoContext(ctx, "empty group")
		l.DebugContext(ctx, "below the level")
	}
	var got, want bytes.Buffer
	log(jsonLogger(&got, true), spanContext())
	want.WriteString(`{"level":"INFO","msg":"plain","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","k":1}
{"level":"WARN","msg":"with","a":1,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","k":2}
{"level":"ERROR","msg":"grouped","a":1,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","g":{"b":2,"h":{"c":3}}}
{"level":"INFO","msg":"empty group","a":1,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","g":{"b":2}}
`)
	if got.String() != want.String() {
		t.Errorf("with a span, got\n%s\nwant\n%s", &got, &want)
	}

	// Without a span, the records are the wrapped handler's own.
	got.Reset()
	want.Reset()
	log(jsonLogger(&got, true), context.Background())
	log(jsonLogger(&want, false), context.Background())
	if got.String() != want.String() {
		t.Errorf("without a span, got\n%s\nwant\n%s", &got, &want)
	}
}
