package pglease

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// recordHandler sends every log record's message and attributes to a
// channel, dropping records when nobody reads.
type recordHandler struct{ out chan<- slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.out <- r.Clone():
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// An error the lead function returns while it still leads is logged
// through the client's logger, with the error, and the campaign goes on.
func TestElectorLogsLeadErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	records := make(chan slog.Record, 64)
	c := testClient(t, Config{Logger: slog.New(recordHandler{records})})
	boom := errors.New("boom")
	terms := make(chan struct{}, 8)
	e, err := c.NewElector("logged", func(context.Context) error {
		select {
		case terms <- struct{}{}:
		default:
		}
		return boom
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	timeout := time.After(30 * time.Second)
	for logged := false; !logged; {
		select {
		case r := <-records:
			if r.Message != "pglease: leader function failed" {
				continue
			}
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "err" {
					logged = errors.Is(a.Value.Any().(error), boom)
				}
				return !logged
			})
		case <-timeout:
			t.Fatal("the lead function's error was never logged")
		}
	}
	// The campaign continued: a second term began.
	for n := 0; n < 2; n++ {
		select {
		case <-terms:
		case <-timeout:
			t.Fatalf("only %d terms began; the campaign stopped after an error", n)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}
