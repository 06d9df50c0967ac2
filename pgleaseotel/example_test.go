package pgleaseotel_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/pgleaseotel"
)

// The observer and the log handler go into the client's Config. Here the
// providers keep what they record in memory, and the events a client would
// report for one lease are fed by hand; a program uses its SDK's providers
// with exporters (or the global ones: Options{}) and pglease.Open.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := pgleaseotel.New(pgleaseotel.Options{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := pglease.Config{
		Observer: obs,
		Logger:   slog.New(pgleaseotel.LogHandler(slog.NewJSONHandler(os.Stderr, nil))),
	}
	_ = cfg // client, err := pglease.Open(ctx, dsn, cfg)

	// A job's span, in which the lease is acquired and released.
	ctx, job := tp.Tracer("example").Start(context.Background(), "job")
	obs.Observe(pglease.Event{Kind: pglease.EventAcquired, Name: "report", Token: 1, Wait: 20 * time.Millisecond, Context: ctx})
	obs.Observe(pglease.Event{Kind: pglease.EventHeartbeat, Count: 1, Latency: 2 * time.Millisecond})
	obs.Observe(pglease.Event{Kind: pglease.EventReleased, Name: "report", Token: 1, Hold: time.Second, Latency: 3 * time.Millisecond, Context: ctx})
	job.End()

	for _, s := range spans.Ended() {
		switch s.Name() {
		case "pglease.acquire", "pglease.release": // timed from the events' Wait and Latency
			fmt.Printf("span %s: %s\n", s.Name(), s.EndTime().Sub(s.StartTime()))
		default:
			fmt.Printf("span %s\n", s.Name())
		}
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		fmt.Printf("metric %s (%s)\n", m.Name, m.Unit)
	}
	// Unordered output:
	// span pglease.acquire: 20ms
	// span pglease.release: 3ms
	// span pglease.lease
	// span job
	// metric pglease.events ({event})
	// metric pglease.renew.duration (s)
	// metric pglease.acquire.wait (s)
	// metric pglease.lease.hold (s)
	// metric pglease.leases.held ({lease})
}

// LogHandler writes the ids of the span in a record's context.
func ExampleLogHandler() {
	logger := slog.New(pgleaseotel.LogHandler(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{} // for a stable output
			}
			return a
		},
	})))
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	}))
	logger.WarnContext(ctx, "pglease: holder's heartbeat is old", "name", "report")
	// Output:
	// level=WARN msg="pglease: holder's heartbeat is old" trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7 name=report
}
