package pglease

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// Server errors get a hint that says what to do, in the library's terms
// (never a CLI command); the cause stays reachable.
func TestServerErrorsCarryAHintAndTheirCause(t *testing.T) {
	for code, want := range map[string]string{
		"42501": "privilege",
		"42P01": "admin.Migrate",
		"28P01": "password",
		"3D000": "database does not exist",
		"53200": "max_locks_per_transaction",
		"08006": "unreachable",
	} {
		cause := &pgconn.PgError{Code: code}
		err := opError("acquire", cause)
		if !strings.Contains(err.Error(), want) || !errors.Is(err, cause) {
			t.Errorf("%s: %v, want a hint containing %q", code, err, want)
		}
		if strings.Contains(err.Error(), "`pglease ") || strings.Contains(err.Error(), "pglease migrate") {
			t.Errorf("%s: %v tells a library user to run a CLI command", code, err)
		}
	}
	err := opError("check", &store.SchemaError{Msg: "column x"})
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "column x") {
		t.Errorf("schema error: %v", err)
	}
}

// Every validation failure is refused before anything connects, with an
// error that matches its sentinel and says "pglease: " once.
func TestValidationFailuresMatchTheirSentinel(t *testing.T) {
	ctx := testCtx(t)
	const closed = "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1" // nothing listens
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // the kind
	}{
		{"Table", Config{Table: "Bad-Table"}, kindIdentifier},
		{"Owner", Config{Owner: "tab\tin owner"}, kindOwner},
		{"TTL", Config{TTL: 10 * time.Millisecond}, kindTTL},
		{"MaxConns", Config{MaxConns: -1}, kindArgument},
		{"PollInterval", Config{PollInterval: -time.Second}, kindArgument},
		{"StatementTimeout", Config{StatementTimeout: -time.Second}, kindArgument},
		{"ConnectTimeout", Config{ConnectTimeout: -time.Second}, kindArgument},
		{"AlertAfter", Config{AlertAfter: -time.Second}, kindArgument},
		{"SafetyMargin", Config{SafetyMargin: -time.Second}, kindArgument},
		{"SubMillisecondRenewInterval", Config{RenewInterval: time.Second + 1}, kindArgument},
		{"MarginTooLargeForTTL", Config{TTL: 10 * time.Second, SafetyMargin: 6 * time.Second}, kindArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(ctx, closed, tc.cfg)
			if c != nil {
				c.Close()
			}
			if !isInvalid(err, tc.want) {
				t.Fatalf("Open: %v, want %v (before connecting)", err, tc.want)
			}
			checkPrefixOnce(t, err)
			checkInvalid(t, err, tc.want)
			if verr := tc.cfg.Validate(); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate: %v, want Open's %v", verr, err)
			}
		})
	}
	if _, err := Open(ctx, "postgres://u@h/db?sslmode=nonsense", Config{}); !isInvalid(err, kindArgument) {
		t.Errorf("Open with a malformed DSN: %v, want an invalid argument", err)
	}
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"SlotsZero", WithSlots(0)},
		{"SlotsTooMany", WithSlots(maxSlots + 1)},
		{"MetadataNotJSON", WithMetadata(map[string]any{"f": func() {}})},
		{"MetadataTooLarge", WithMetadata(map[string]any{"k": strings.Repeat("x", maxMetadataBytes)})},
		{"MinHoldNegative", WithMinHold(-time.Second)},
		{"MinHoldAboveTTL", WithMinHold(time.Hour)},
	} {
		err := (Config{}).Validate(tc.opt)
		if !isInvalid(err, kindArgument) {
			t.Errorf("%s: %v, want an invalid argument", tc.name, err)
		}
		checkPrefixOnce(t, err)
		checkInvalid(t, err, kindArgument)
	}
	var unsupported *json.UnsupportedTypeError
	if err := (Config{}).Validate(WithMetadata(map[string]any{"f": func() {}})); !errors.As(err, &unsupported) {
		t.Errorf("metadata that does not encode: %v, want its encoding error as the cause", err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string // the kind
	}{
		{"Name", nameErr(""), kindName},
		{"NameOfTheSlotForm", nameErr("job#0"), kindName},
		{"Owner", (Config{Owner: "a\nb"}).Validate(), kindOwner},
		{"SlotNamesTooLong", func() error {
			_, err := (Config{}).Plan(strings.Repeat("x", 254), WithSlots(10))
			return err
		}(), kindName},
	} {
		checkPrefixOnce(t, tc.err)
		checkInvalid(t, tc.err, tc.want)
	}
	if p, err := (Config{}).Plan(strings.Repeat("x", 253), WithSlots(10)); err != nil || len(p.Names) != 10 {
		t.Errorf("Plan of a semaphore whose slot names just fit: %v, %v", p.Names, err)
	}
	if err := (Config{}).Validate(WithMetadata(map[string]any{"team": "ops"}), Option{}); err != nil {
		t.Errorf("valid metadata and a zero Option refused: %v", err)
	}
	if _, err := NewFromPool(nil, Config{}); !isInvalid(err, kindArgument) {
		t.Errorf("NewFromPool(nil): %v", err)
	}
	if _, err := NewFromDB(nil, Config{}); !isInvalid(err, kindArgument) {
		t.Errorf("NewFromDB(nil): %v", err)
	}
	c := testClient(t, Config{})
	if _, err := c.NewElector("n", nil, ElectorConfig{}); !isInvalid(err, kindArgument) {
		t.Errorf("NewElector with a nil function: %v", err)
	}
	for _, cfg := range []ElectorConfig{{StepDownHoldOff: -time.Second}, {HealthTolerance: -time.Second}} {
		if _, err := c.NewElector("n", func(context.Context) error { return nil }, cfg); !isInvalid(err, kindArgument) {
			t.Errorf("NewElector with %+v: %v, want an invalid argument", cfg, err)
		}
	}
	if err := c.TryRun(ctx, "n", nil); !isInvalid(err, kindArgument) {
		t.Errorf("TryRun with a nil function: %v", err)
	}
	if err := c.Run(ctx, "n", nil); !isInvalid(err, kindArgument) {
		t.Errorf("Run with a nil function: %v", err)
	}
	if infos, err := c.list(ctx); err != nil || len(infos) != 0 {
		t.Errorf("rows after refused calls: %v, %v", infos, err)
	}
}

// nameErr is Config.Plan's verdict on a lease name.
func nameErr(name string) error {
	_, err := (Config{}).Plan(name)
	return err
}

// isInvalid reports whether err is an *InvalidError of kind.
func isInvalid(err error, kind string) bool {
	var ie *InvalidError
	return errors.As(err, &ie) && ie.Kind == kind
}

// checkInvalid checks that err is an *InvalidError of kind whose Reason
// is its message without the prefix and the kind.
func checkInvalid(t *testing.T, err error, kind string) {
	t.Helper()
	var ie *InvalidError
	if !isInvalid(err, kind) || !errors.As(err, &ie) || ie.Reason == "" {
		t.Errorf("%v: want an *InvalidError of kind %q", err, kind)
		return
	}
	if strings.Contains(ie.Reason, "pglease: ") || err.Error() != "pglease: invalid "+kind+": "+ie.Reason {
		t.Errorf("%v: Reason %q is not the message without its prefix and kind", err, ie.Reason)
	}
}

// Errors that wrap other pglease errors still say "pglease: " once.
func TestErrorsSayPgleaseOnce(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	other := testClient(t, Config{Table: c.cfg.Table})
	l, err := c.TryAcquire(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	_, held := other.TryAcquire(ctx, "once")
	checkPrefixOnce(t, held)
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, gaveUp := other.Acquire(wctx, "once")
	cancel()
	if !errors.Is(gaveUp, ErrNotAcquired) || !errors.Is(gaveUp, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its context: %v", gaveUp)
	}
	checkPrefixOnce(t, gaveUp)
	if _, err := other.forceRelease(ctx, "once"); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew after a force-release: %v, want ErrLeaseLost", err)
	} else {
		checkPrefixOnce(t, err)
	}
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	guard := l.Guard(ctx, tx)
	if !errors.Is(guard, ErrNotHeld) || !errors.Is(guard, ErrLeaseLost) {
		t.Fatalf("Guard of a lost lease: %v", guard)
	}
	checkPrefixOnce(t, guard)
	// A short TTL: its next renewal, within a third of a second, finds
	// the row gone.
	short := testClient(t, Config{Table: c.cfg.Table, TTL: time.Second})
	ran := short.TryRun(ctx, "run", func(fctx context.Context) error {
		if _, err := other.forceRelease(ctx, "run"); err != nil {
			return err
		}
		select {
		case <-fctx.Done():
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("the function's context outlived its lease")
		}
	})
	if !errors.Is(ran, ErrLeaseLost) {
		t.Fatalf("TryRun whose lease was lost: %v", ran)
	}
	checkPrefixOnce(t, ran)
	if _, err := c.Get(ctx, "missing"); !errors.Is(err, ErrNoLease) {
		t.Fatalf("Get of a missing lease: %v", err)
	} else {
		checkPrefixOnce(t, err)
	}
	c.Close()
	if _, err := c.TryAcquire(ctx, "closed"); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryAcquire on a closed client: %v", err)
	} else {
		checkPrefixOnce(t, err)
	}
}

func checkPrefixOnce(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Error("no error")
		return
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "pglease: ") || strings.Count(msg, "pglease: ") != 1 {
		t.Errorf("%q: want one \"pglease: \" prefix", msg)
	}
}
