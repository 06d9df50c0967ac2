package pglease

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// The per-lease TTL and minimum hold obey the same rules, with the same
// messages, and a refused lease leaves no row behind.
func TestUnsafeLeaseTimingRefused(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{SafetyMargin: 5 * time.Second})
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		// Margin 5s, default interval 4s: a deadline at 7s leaves one
		// renewal.
		{"DefaultIntervalTooLongForShortTTL", []Option{WithTTL(12 * time.Second)}, "fewer than two renewal attempts"},
		{"MarginAboveHalf", []Option{WithTTL(9 * time.Second)}, "below half the TTL"},
		{"SubMillisecondTTL", []Option{WithTTL(time.Minute + time.Nanosecond)}, "TTL 1m0.000000001s is not a whole number of milliseconds"},
		{"SubMillisecondMinHold", []Option{WithMinHold(time.Second + 100*time.Microsecond)}, "minimum hold 1.0001s is not a whole number of milliseconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.TryAcquire(ctx, "n", tc.opts...)
			if err == nil {
				t.Fatal("TryAcquire accepted it")
			}
			sentinel := kindArgument
			if strings.HasPrefix(tc.want, "TTL ") {
				sentinel = kindTTL
			}
			if !isInvalid(err, sentinel) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("TryAcquire: %v, want %v saying %q", err, sentinel, tc.want)
			}
			if _, err := c.NewElector("n", func(context.Context) error { return nil }, ElectorConfig{LeaseOptions: tc.opts}); !isInvalid(err, sentinel) {
				t.Errorf("NewElector: %v, want %v", err, sentinel)
			}
			if verr := (Config{SafetyMargin: 5 * time.Second}).Validate(tc.opts...); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate: %v, want the acquisition's %v", verr, err)
			}
		})
	}
	// The same config message at Open and per lease.
	_, cerr := NewFromPool(pgtest.Pool(t), Config{Table: c.cfg.Table, TTL: 12 * time.Second, SafetyMargin: 5 * time.Second})
	_, lerr := c.TryAcquire(ctx, "n", WithTTL(12*time.Second))
	if cerr == nil || lerr == nil || cerr.Error() != lerr.Error() {
		t.Errorf("config and lease messages differ:\n%v\n%v", cerr, lerr)
	}
	if l, err := c.TryAcquire(ctx, "n", WithTTL(20*time.Second)); err != nil {
		t.Errorf("a safe lease TTL was refused: %v", err)
	} else {
		_ = l.Release(ctx)
	}
	if infos, err := c.list(ctx); err != nil || len(infos) != 0 {
		t.Errorf("rows after refused leases: %v, %v", infos, err)
	}
}
