package pgleaseotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/pgleaseotel"
)

// TestMain runs the tests against a throwaway PostgreSQL cluster (or
// PGLEASE_TEST_DSN).
func TestMain(m *testing.M) { pgtest.Main(m) }

// openClient returns a client on a fresh schema (unless cfg names a
// table), closed at cleanup.
func openClient(t *testing.T, cfg pglease.Config) *pglease.Client {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = pgtest.Schema(t) + ".leases"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pglease.Open(ctx, pgtest.DSN(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testCtx bounds a test's calls, beyond pgtest.Patience so that a wait
// that times out says what it waited for.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*pgtest.Patience)
	t.Cleanup(cancel)
	return ctx
}

// A real client's lease, acquired and released in a traced job, renewed
// in between: the acquire and release spans are children of the job's
// span, the lease span of the acquire span, ended at the release; the
// metrics count it, one renewal round trip per heartbeat.
func TestTracesAndMetricsOfARealLease(t *testing.T) {
	tm := newTelemetry(t, true)
	sig := newSignals(tm.obs)
	c := openClient(t, pglease.Config{Observer: sig})
	ctx, job := tm.tp.Tracer("test").Start(testCtx(t), "job")

	l, err := c.Acquire(ctx, "work", pglease.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acquired := sig.await(t, pglease.EventAcquired, "work")
	sig.await(t, pglease.EventRenewed, "work") // the signal of a renewal
	// The client's id, as its lease's row records it.
	info, err := c.Get(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Client string }
	if err := json.Unmarshal([]byte(info.Metadata), &meta); err != nil || meta.Client == "" {
		t.Fatalf("metadata %s: %v, want the client's id", info.Metadata, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	job.End()
	// Close waits for the last event to be delivered: what follows sees
	// them all.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	acquire := one(t, "pglease.acquire", tm.ended("pglease.acquire"))
	if acquire.Parent().SpanID() != job.SpanContext().SpanID() || acquire.SpanContext().TraceID() != job.SpanContext().TraceID() {
		t.Errorf("acquire span's parent %v, want the job's span %v", acquire.Parent(), job.SpanContext())
	}
	if d := acquire.EndTime().Sub(acquire.StartTime()); d != acquired.Wait {
		t.Errorf("acquire span lasts %s, the event's wait is %s", d, acquired.Wait)
	}
	if v, _ := attr(acquire, "pglease.lease.token"); v.AsInt64() != l.Token() {
		t.Errorf("acquire span token %d, want %d", v.AsInt64(), l.Token())
	}
	if v, _ := attr(acquire, "pglease.client.id"); v.AsString() != meta.Client || acquired.Client != meta.Client {
		t.Errorf("acquire span client %q, event's %q, want %q", v.AsString(), acquired.Client, meta.Client)
	}
	lease := one(t, "pglease.lease", tm.ended("pglease.lease"))
	if lease.Parent().SpanID() != acquire.SpanContext().SpanID() || lease.Status().Code != codes.Unset {
		t.Errorf("lease span: parent %v (want the acquire span), status %v", lease.Parent(), lease.Status())
	}
	release := one(t, "pglease.release", tm.ended("pglease.release"))
	if release.Parent().SpanID() != job.SpanContext().SpanID() || release.Status().Code != codes.Unset {
		t.Errorf("release span: parent %v (want the job's span), status %v", release.Parent(), release.Status())
	}
	if lease.EndTime().Before(release.StartTime()) {
		t.Errorf("lease span ended at %v, before its release began at %v", lease.EndTime(), release.StartTime())
	}
	if n := len(tm.open("pglease.lease")); n != 0 {
		t.Errorf("%d lease spans left open", n)
	}

	ms := tm.metrics(t)
	for k, want := range map[pglease.EventKind]int64{pglease.EventAcquired: 1, pglease.EventReleased: 1} {
		if got := mustInt(t, ms, "pglease.events", kind(k), name("work")); got != want {
			t.Errorf("events %s = %d, want %d", k, got, want)
		}
	}
	heartbeats := mustInt(t, ms, "pglease.events", kind(pglease.EventHeartbeat))
	if renewed := mustInt(t, ms, "pglease.events", kind(pglease.EventRenewed), name("work")); heartbeats < 1 || renewed != heartbeats {
		t.Errorf("%d heartbeats, %d renewals; want as many, at least one", heartbeats, renewed)
	}
	if n, _ := histogram(t, ms, "pglease.renew.duration"); int64(n) != heartbeats {
		t.Errorf("renew.duration has %d round trips, want one per heartbeat (%d)", n, heartbeats)
	}
	if n, _ := histogram(t, ms, "pglease.acquire.wait", name("work")); n != 1 {
		t.Errorf("acquire.wait count %d", n)
	}
	if n, sum := histogram(t, ms, "pglease.lease.hold", name("work"), kind(pglease.EventReleased)); n != 1 || sum <= 0 {
		t.Errorf("lease.hold count %d sum %v", n, sum)
	}
	if got := mustInt(t, ms, "pglease.leases.held", name("work")); got != 0 {
		t.Errorf("leases.held = %d after the release", got)
	}
}

// logRecord is what traceLog keeps of a record.
type logRecord struct {
	msg     string
	traceID trace.TraceID     // of the record's context
	attrs   map[string]string // top-level attributes, as strings
}

// traceLog is a slog handler that records each record with the trace id
// of its context.
type traceLog struct {
	mu      sync.Mutex
	records []logRecord
}

func (h *traceLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *traceLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *traceLog) WithGroup(string) slog.Handler            { return h }

func (h *traceLog) Handle(ctx context.Context, r slog.Record) error {
	rec := logRecord{msg: r.Message, traceID: trace.SpanContextFromContext(ctx).TraceID(), attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, rec)
	return nil
}

// find returns the records with message msg.
func (h *traceLog) find(msg string) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range h.records {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// A warning the library logs inside an Acquire call carries the caller's
// trace: the handler sees the caller's span in the record's context, and
// LogHandler writes its ids. The warning: a contender finds a holder whose
// heartbeat is older than AlertAfter.
func TestLogsCarryTheCallersTrace(t *testing.T) {
	ctx := testCtx(t)
	table := pgtest.Schema(t) + ".leases"
	// A long TTL and renewal interval: the holder does not renew during
	// the test, and its heartbeat is aged by hand.
	holder := openClient(t, pglease.Config{Table: table, TTL: 3 * time.Hour, RenewInterval: time.Hour, SafetyMargin: time.Second})
	held, err := holder.TryAcquire(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	tm := newTelemetry(t, false)
	sig := newSignals(tm.obs)
	logs := &traceLog{}
	watcher := openClient(t, pglease.Config{Table: table, AlertAfter: 300 * time.Millisecond,
		Logger: slog.New(pgleaseotel.LogHandler(logs)), Observer: sig})
	pgtest.LeaseTable(t, pgtest.DSN(t), table).SetHeartbeatAge("stuck", time.Second)

	spanCtx, span := tm.tp.Tracer("test").Start(ctx, "contender")
	if _, err := watcher.TryAcquire(spanCtx, "stuck"); !errors.Is(err, pglease.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held name: %v", err)
	}
	span.End()

	warnings := logs.find("pglease: holder's heartbeat is old")
	if len(warnings) != 1 {
		t.Fatalf("%d warnings of an old heartbeat, want 1", len(warnings))
	}
	w, sc := warnings[0], span.SpanContext()
	if w.traceID != sc.TraceID() {
		t.Errorf("warning's context has trace %s, want the caller's %s", w.traceID, sc.TraceID())
	}
	if w.attrs[pgleaseotel.TraceIDKey] != sc.TraceID().String() || w.attrs[pgleaseotel.SpanIDKey] != sc.SpanID().String() {
		t.Errorf("warning's attributes %v, want trace_id %s and span_id %s", w.attrs, sc.TraceID(), sc.SpanID())
	}

	sig.await(t, pglease.EventAlert, "stuck")
	ms := tm.metrics(t)
	for _, k := range []pglease.EventKind{pglease.EventContended, pglease.EventAlert} {
		if got := mustInt(t, ms, "pglease.events", kind(k)); got != 1 {
			t.Errorf("events %s = %d, want 1", k, got)
		}
	}
}
