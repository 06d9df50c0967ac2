package pglease

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// Configurations that cannot keep a lease safely are refused by every
// constructor, before anything is sent, with an error that names the
// problem and matches an invalid TTL when the TTL itself is out of range,
// else an invalid argument; the same rule applies to a lease's own TTL.
func TestUnsafeConfigRefused(t *testing.T) {
	ctx := testCtx(t)
	pool := pgtest.Pool(t)
	db := openSQL(t, false)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the error; "" when the config is valid
	}{
		{"Defaults", Config{}, ""},
		{"MarginJustBelowDefaultLimit", Config{TTL: 30 * time.Second, SafetyMargin: 9999 * time.Millisecond}, ""},
		{"ShortIntervalAllowsLargeMargin", Config{TTL: 30 * time.Second, SafetyMargin: 14 * time.Second, RenewInterval: time.Second}, ""},
		// The default interval TTL/3 leaves only one renewal before a
		// deadline of TTL - 14s = 16s.
		{"MarginNearHalfWithDefaultInterval", Config{TTL: 30 * time.Second, SafetyMargin: 14 * time.Second}, "fewer than two renewal attempts"},
		{"MarginAtThirdWithDefaultInterval", Config{TTL: 30 * time.Second, SafetyMargin: 10 * time.Second}, "fewer than two renewal attempts"},
		{"MarginHalf", Config{TTL: 30 * time.Second, SafetyMargin: 15 * time.Second, RenewInterval: time.Second}, "below half the TTL"},
		{"MarginAboveTTL", Config{TTL: 30 * time.Second, SafetyMargin: time.Hour, RenewInterval: time.Second}, "below half the TTL"},
		{"IntervalTooLong", Config{TTL: 30 * time.Second, RenewInterval: 12 * time.Second}, "fewer than two renewal attempts"},
		{"IntervalHuge", Config{RenewInterval: time.Duration(1<<63 - 1).Truncate(time.Millisecond)}, "fewer than two renewal attempts"},
		{"DefaultTTLWithLongInterval", Config{RenewInterval: time.Hour}, "fewer than two renewal attempts"},
		{"SubMillisecondTTL", Config{TTL: 30*time.Second + 500*time.Microsecond}, "TTL 30.0005s is not a whole number of milliseconds"},
		{"SubMillisecondMargin", Config{SafetyMargin: 2*time.Second + 1}, "SafetyMargin 2.000000001s is not a whole number of milliseconds"},
		{"SubMillisecondInterval", Config{RenewInterval: 5*time.Second + time.Microsecond}, "RenewInterval 5.000001s is not a whole number of milliseconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Table = pgtest.Schema(t) + ".leases"
			for _, open := range []struct {
				name string
				open func() (*Client, error)
			}{
				{"NewFromPool", func() (*Client, error) { return NewFromPool(pool, tc.cfg) }},
				{"NewFromDB", func() (*Client, error) { return NewFromDB(db, tc.cfg) }},
				// Port 1 is closed: a valid config fails to connect instead.
				{"Open", func() (*Client, error) {
					return Open(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1", tc.cfg)
				}},
				// Tools check their input with Validate: the same verdict.
				{"Validate", func() (*Client, error) { return nil, tc.cfg.Validate() }},
				{"Plan", func() (*Client, error) { _, err := tc.cfg.Plan("n"); return nil, err }},
			} {
				c, err := open.open()
				if c != nil {
					_ = c.Close()
				}
				sentinel := kindArgument
				if strings.HasPrefix(tc.want, "TTL ") {
					sentinel = kindTTL
				}
				switch {
				case tc.want == "" && (isInvalid(err, kindTTL) || isInvalid(err, kindArgument)):
					t.Errorf("%s refused a safe config: %v", open.name, err)
				case tc.want == "":
				case !isInvalid(err, sentinel):
					t.Errorf("%s: %v, want %v", open.name, err, sentinel)
				case !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "pglease: "):
					t.Errorf("%s: %q, want it to say %q", open.name, err, tc.want)
				}
			}
		})
	}
}

// Plan reports the timing a lease gets: the defaults, and what the
// configuration sets.
func TestPlanReportsTheTimingALeaseGets(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		opts []Option
		want Plan
	}{
		{Config{}, nil, Plan{TTL: 30 * time.Second, RenewInterval: 10 * time.Second, SafetyMargin: 6 * time.Second}},
		{Config{}, []Option{WithTTL(10 * time.Second)}, Plan{TTL: 10 * time.Second, RenewInterval: 10 * time.Second / 3, SafetyMargin: 2 * time.Second}},
		{Config{TTL: time.Minute, RenewInterval: 5 * time.Second, SafetyMargin: 20 * time.Second}, nil, Plan{TTL: time.Minute, RenewInterval: 5 * time.Second, SafetyMargin: 20 * time.Second}},
	} {
		got, err := tc.cfg.Plan("job", tc.opts...)
		tc.want.Names = []string{"job"}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v.Plan(job, %d options) = %+v, %v, want %+v", tc.cfg, len(tc.opts), got, err, tc.want)
		}
	}
	if _, err := (Config{}).Plan("job", WithTTL(500*time.Millisecond)); !isInvalid(err, kindTTL) {
		t.Errorf("Plan(job, WithTTL(500ms)): %v, want an invalid TTL", err)
	}
	if got, err := (Config{}).Plan("job", WithMinHold(4*time.Second)); err != nil || got.MinHold != 4*time.Second {
		t.Errorf("Plan(job, WithMinHold(4s)) = %+v, %v, want MinHold 4s", got, err)
	}
}

// Plan spells the rows an acquisition contends for as the acquisition
// does: the name, or the slot names a semaphore's holders get.
func TestPlanSpellsTheRowsAnAcquisitionContendsFor(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want []string
	}{
		{nil, []string{"job"}},
		{[]Option{WithSlots(1), WithTTL(time.Minute), WithFastFailover()}, []string{"job"}},
		{[]Option{WithSlots(3)}, []string{"job#0", "job#1", "job#2"}},
	} {
		got, err := (Config{}).Plan("job", tc.opts...)
		if err != nil || !slices.Equal(got.Names, tc.want) {
			t.Errorf("Plan(job, %d options).Names = %q, %v, want %q", len(tc.opts), got.Names, err, tc.want)
		}
	}
	if _, err := (Config{}).Plan("job", WithSlots(0)); !isInvalid(err, kindArgument) {
		t.Errorf("Plan(job, WithSlots(0)): %v, want an invalid argument", err)
	}
	if _, err := (Config{}).Plan("bad#1"); !isInvalid(err, kindName) {
		t.Errorf("Plan(bad#1): %v, want an invalid lease name", err)
	}
}

// One owner rule: checkOwner, Validate and the constructors agree.
func TestOwnerRuleOfValidateAndTheConstructorsAgree(t *testing.T) {
	for _, tc := range []struct {
		owner string
		want  string // "" when valid
	}{
		{"web-7f9c", ""},
		{strings.Repeat("o", 255), ""},
		{"ünïcode 主机", ""},
		{"", "owner is empty"},
		{strings.Repeat("o", 256), "256 bytes, the maximum is 255"},
		{"bad\xff", "not valid UTF-8"},
		{"a\nb", "control character U+000A"},
		{"nul\x00", "control character U+0000"},
		{"del\x7f", "control character U+007F"},
	} {
		err := checkOwner(tc.owner)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkOwner(%q) = %v", tc.owner, err)
		case tc.want != "" && (!isInvalid(err, kindOwner) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("checkOwner(%q) = %v, want an invalid owner saying %q", tc.owner, err, tc.want)
		}
		if tc.owner == "" {
			continue // Config.Owner "" means the default
		}
		if verr := (Config{Owner: tc.owner}).Validate(); (verr == nil) != (err == nil) || err != nil && verr.Error() != err.Error() {
			t.Errorf("Validate with owner %q = %v, checkOwner = %v", tc.owner, verr, err)
		}
		c, nerr := NewFromPool(pgtest.Pool(t), Config{Owner: tc.owner})
		if c != nil {
			_ = c.Close()
		}
		if (nerr == nil) != (err == nil) {
			t.Errorf("NewFromPool with owner %q = %v, checkOwner = %v", tc.owner, nerr, err)
		}
	}
}

func TestInvalidInputIsRejectedBeforeAnythingIsSent(t *testing.T) {
	ctx := testCtx(t)
	for _, table := range []string{"Leases", `x"; DROP TABLE y; --`, "a.b.c", "ünïcode", "1abc", strings.Repeat("a", 64), "a.", ".a"} {
		if _, err := Open(ctx, "postgres://nowhere.invalid:1/db", Config{Table: table}); !isInvalid(err, kindIdentifier) {
			t.Errorf("table %q: %v, want an invalid identifier", table, err)
		}
		if _, err := schemaDDL(table); !isInvalid(err, kindIdentifier) {
			t.Errorf("DDL(%q): %v", table, err)
		}
	}
	c := testClient(t, Config{})
	for _, name := range []string{"", strings.Repeat("n", 256), "bad\xff", "nul\x00byte"} {
		if _, err := c.TryAcquire(ctx, name); !isInvalid(err, kindName) {
			t.Errorf("name %q: %v, want an invalid lease name", name, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, 500 * time.Millisecond, 200 * 365 * 24 * time.Hour} {
		if _, err := c.TryAcquire(ctx, "ok", WithTTL(ttl)); !isInvalid(err, kindTTL) {
			t.Errorf("ttl %s: %v, want an invalid TTL", ttl, err)
		}
	}
	if _, err := Open(ctx, "postgres://x", Config{TTL: -1}); !isInvalid(err, kindTTL) {
		t.Errorf("Config.TTL -1: %v", err)
	}
	if _, err := c.TryAcquire(ctx, "ok", WithTTL(2*time.Second), WithMinHold(3*time.Second)); !isInvalid(err, kindArgument) {
		t.Errorf("min hold above TTL: %v", err)
	}
	// None of it created a row.
	if infos, err := c.list(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("List = %v, %v; want no rows", infos, err)
	}
	if err := nameErr(strings.Repeat("é", 127)); err != nil {
		t.Errorf("254-byte name rejected: %v", err)
	}
}
