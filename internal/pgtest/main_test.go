package pgtest

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

var validSchema = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func schemaExists(t *testing.T, name string) bool {
	return Value[bool](t, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name)
}

func TestSchemaName(t *testing.T) {
	for _, name := range []string{
		"TestX", "TestX/sub-test#01", strings.Repeat("Ünïcödé/", 30), "", "9lives",
	} {
		got := schemaName(name, "abc123", 12345)
		if !validSchema.MatchString(got) {
			t.Errorf("schemaName(%q) = %q: invalid", name, got)
		}
		if !strings.HasSuffix(got, "_abc123_12345") {
			t.Errorf("schemaName(%q) = %q: suffix lost", name, got)
		}
	}
}

func TestSchema(t *testing.T) {
	var name string
	t.Run("Create/With Odd-Name", func(t *testing.T) {
		name = Schema(t)
		if !validSchema.MatchString(name) {
			t.Fatalf("invalid schema name %q", name)
		}
		if !schemaExists(t, name) {
			t.Fatalf("schema %q not created", name)
		}
		if _, err := Pool(t).Exec(ctxT(t), "CREATE TABLE "+name+".x (id int)"); err != nil {
			t.Fatal(err)
		}
		if other := Schema(t); other == name {
			t.Fatalf("Schema returned %q twice", name)
		}
	})
	if schemaExists(t, name) {
		t.Fatalf("schema %q not dropped", name)
	}
}

// A helper's named connection serves every read of a test, and Backends
// counts it: one, however often the helper reads, and none once the test
// has ended.
func TestAppConnectionsAreCounted(t *testing.T) {
	var app, other string
	t.Run("Reads", func(t *testing.T) {
		app, other = AppName("pgtest reads"), AppName("pgtest reads")
		if app == other || len(app) > 63 {
			t.Fatalf("AppName: %q and %q, want two distinct names of at most 63 bytes", app, other)
		}
		pool, conn := AppPool(t, app), AppConn(t, other)
		ctx := ctxT(t)
		for i := range 20 {
			var n int
			if err := pool.QueryRow(ctx, "SELECT $1::int", i).Scan(&n); err != nil || n != i {
				t.Fatalf("read %d through the pool: %d, %v", i, n, err)
			}
			if err := conn.QueryRow(ctx, "SELECT $1::int", i).Scan(&n); err != nil || n != i {
				t.Fatalf("read %d on the connection: %d, %v", i, n, err)
			}
		}
		if n, m := Backends(t, app), Backends(t, other); n != 1 || m != 1 {
			t.Fatalf("%d sessions named %q and %d named %q after 20 reads each, want 1 and 1", n, app, m, other)
		}
	})
	// Closed at the end of the subtest; the server ends the sessions a
	// moment later.
	WaitFor(t, Patience, "the helpers' sessions to end", func() bool {
		return Backends(t, app)+Backends(t, other) == 0
	})
}

func TestTerminateBackends(t *testing.T) {
	ctx := ctxT(t)
	cfg, err := pgx.ParseConfig(DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "pgtest_terminate_me"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if n := TerminateBackends(t, "pgtest_terminate_%"); n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("ping succeeded on terminated backend")
	}
	if n := TerminateBackends(t, "pgtest_terminate_%"); n != 0 {
		t.Fatalf("terminated %d backends, want 0", n)
	}
}

func TestRestartSharedCluster(t *testing.T) {
	c := RequireCluster(t)
	ctx := ctxT(t)
	pool := Pool(t)
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	var one int
	var err error
	// The pool's old connections are dead; a retry gets a fresh one.
	for i := 0; i < 5; i++ {
		if err = pool.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
			break
		}
	}
	if err != nil || one != 1 {
		t.Fatalf("after restart: %d, %v", one, err)
	}
}

func TestLeakDetection(t *testing.T) {
	stop := make(chan struct{})
	go func() { <-stop }()
	found := false
	for _, g := range interestingGoroutines() {
		if strings.Contains(g, "TestLeakDetection") {
			found = true
		}
	}
	close(stop)
	if !found {
		t.Fatal("leaked goroutine not reported")
	}
}
