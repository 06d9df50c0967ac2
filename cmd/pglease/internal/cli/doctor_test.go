//go:build unix

package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pglease/pglease/internal/pgtest"
)

type doctorReport struct {
	Status string  `json:"status"`
	Server string  `json:"server"`
	Table  string  `json:"table"`
	TTL    float64 `json:"ttl_seconds"`
	Checks []struct {
		Name, Status, Summary, Advice string
	} `json:"checks"`
}

// doctor runs pglease doctor --json with args and returns its exit status
// and report, with each check by name.
func doctor(t *testing.T, env []string, args ...string) (int, doctorReport, map[string]string) {
	t.Helper()
	code, stdout, stderr := run(t, env, append([]string{"doctor", "--json"}, args...)...)
	var r doctorReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("doctor --json %v: exit %d, %v\nstdout: %s\nstderr: %s", args, code, err, stdout, stderr)
	}
	byName := map[string]string{}
	for _, c := range r.Checks {
		byName[c.Name] = c.Status
	}
	return code, r, byName
}

func adviceOf(r doctorReport, name string) string {
	for _, c := range r.Checks {
		if c.Name == name {
			return c.Summary + " → " + c.Advice
		}
	}
	return ""
}

var doctorChecks = []string{"server", "privileges", "pooler", "notify", "timeouts", "replication", "clock", "headroom"}

// On a direct connection, as a role that owns the table, every check
// passes: exit 0, "all is well", and --json says the same.
func TestDoctorOnADirectConnectionFindsAllWell(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	code, stdout, stderr := run(t, env, "doctor", "--table", table, "--fleet", "10")
	if code != 0 || !strings.Contains(stdout, "all is well") {
		t.Fatalf("doctor: exit %d\n%s\nstderr: %s", code, stdout, stderr)
	}
	t.Logf("pglease doctor:\n%s", stdout)
	code, r, checks := doctor(t, env, "--table", table, "--ttl", "15s")
	if code != 0 || r.Status != "ok" || r.Table != table || r.TTL != 15 || len(r.Checks) != len(doctorChecks) {
		t.Errorf("doctor --json: exit %d, %+v", code, r)
	}
	for _, name := range doctorChecks {
		if checks[name] != "ok" {
			t.Errorf("check %s: %q, want ok: %s", name, checks[name], adviceOf(r, name))
		}
	}
	for _, args := range [][]string{{"--ttl", "0s"}, {"--fleet", "0"}, {"extra"}} {
		if code, _, stderr := run(t, env, append([]string{"doctor"}, args...)...); code != 2 {
			t.Errorf("doctor %v: exit %d, want 2 (usage): %s", args, code, stderr)
		}
	}
}

// What must change is named: the privileges a role lacks, as GRANT
// statements (exit 1), a fleet the server has no room for (exit 1), an
// idle_session_timeout (a warning alone: exit 3).
func TestDoctorSaysWhatToChange(t *testing.T) {
	t.Parallel()
	_, table := tableEnv(t)
	schema := strings.Split(table, ".")[0]
	dsn := pgtest.RoleDSN(t, "USAGE ON SCHEMA "+schema, "SELECT ON "+table)
	role := strings.SplitN(strings.TrimPrefix(dsn, "postgres://"), "@", 2)[0]
	pgtest.Exec(t, "ALTER ROLE "+role+" SET idle_session_timeout = '1min'")
	limited := []string{"PGLEASE_DSN=" + dsn}
	code, r, checks := doctor(t, limited, "--table", table, "--fleet", "1000000")
	if code != 1 || r.Status != "fail" || checks["privileges"] != "fail" || checks["headroom"] != "fail" || checks["timeouts"] != "warn" {
		t.Fatalf("doctor as a role without grants: exit %d, %+v", code, r)
	}
	for _, want := range []string{
		"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE " + table + " TO",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE " + table + "_waiters TO",
		"GRANT USAGE ON SEQUENCE " + table + "_token_seq TO",
	} {
		if !strings.Contains(adviceOf(r, "privileges"), want) {
			t.Errorf("the privileges' advice lacks %q: %s", want, adviceOf(r, "privileges"))
		}
	}
	if !strings.Contains(adviceOf(r, "timeouts"), "idle_session_timeout = 0") {
		t.Errorf("the timeouts' advice: %s", adviceOf(r, "timeouts"))
	}
	pgtest.Exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+table+", "+table+"_waiters TO "+role)
	pgtest.Exec(t, "GRANT USAGE ON SEQUENCE "+table+"_token_seq TO "+role)
	code, r, checks = doctor(t, limited, "--table", table)
	if code != 3 || r.Status != "warn" || checks["privileges"] != "ok" || checks["timeouts"] != "warn" {
		t.Errorf("doctor with the grants, idle_session_timeout set: exit %d, %+v; want 3, a warning", code, r)
	}
}

// Through PgBouncer, doctor names the pooler and its mode: in transaction
// mode the notification sent is not received, and plain leases work
// (exit 3, warnings); in session mode fast failover is refused.
func TestDoctorThroughPgBouncer(t *testing.T) {
	t.Parallel()
	_, table := tableEnv(t)
	for _, mode := range []string{"transaction", "session"} {
		bouncer := []string{"PGLEASE_DSN=" + pgtest.PgBouncer(t, pgtest.DSN(t), mode)}
		code, r, checks := doctor(t, bouncer, "--table", table)
		if code != 3 || checks["pooler"] != "warn" || checks["privileges"] != "ok" || checks["server"] != "ok" {
			t.Errorf("doctor through PgBouncer (%s): exit %d, %+v", mode, code, r)
		}
		pooler := adviceOf(r, "pooler")
		switch mode {
		case "transaction":
			if !strings.Contains(pooler, "transaction-pooling") || checks["notify"] != "warn" || checks["timeouts"] != "warn" {
				t.Errorf("PgBouncer in transaction mode: pooler %q, notify %s, timeouts %s", pooler, checks["notify"], checks["timeouts"])
			}
		case "session":
			if !strings.Contains(pooler, "session-pooling") || !strings.Contains(pooler, "fast-failover") {
				t.Errorf("PgBouncer in session mode: pooler %q", pooler)
			}
		}
		t.Logf("PgBouncer, %s mode: %s", mode, pooler)
	}
}
