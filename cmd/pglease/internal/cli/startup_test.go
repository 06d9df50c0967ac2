//go:build unix

package cli_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
)

// freshDatabase creates an empty database, dropped when the test ends, and
// returns a DSN for it.
func freshDatabase(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("cli_fresh_%d", time.Now().UnixNano())
	ident := pgx.Identifier{name}.Sanitize()
	pgtest.Exec(t, "CREATE DATABASE "+ident)
	t.Cleanup(func() { pgtest.Exec(t, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)") })
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// Many replicas start at once on an empty database: four
// 'pglease run --wait' of one job, two with --table pglease_leases and two
// with --table public.pglease_leases, half of them with --fast-failover,
// and two 'pglease migrate' with the same two spellings beside them. Every
// one exits 0, each run having run its command once, one after the other,
// with increasing tokens. Each round is a fresh database, so that the
// schema is created anew each time.
func TestRunManyReplicasStartAtOnceOnAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	for round := range 6 {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			env := []string{"PGLEASE_DSN=" + freshDatabase(t)}
			log := filepath.Join(t.TempDir(), "tokens")
			job := `echo "$PGLEASE_TOKEN" >> ` + log + `; echo "$PGLEASE_TOKEN"`
			type started struct {
				label string
				p     *proc
			}
			var runs, migrates []started
			for i := range 4 {
				table := "pglease_leases"
				if i%2 == 1 {
					table = "public.pglease_leases"
				}
				args := []string{"run", "job", "--wait", "--table", table}
				label := "--table " + table
				if i >= 2 {
					args = append(args, "--fast-failover")
					label += " --fast-failover"
				}
				runs = append(runs, started{label, start(t, env, append(args, "--", "sh", "-c", job)...)})
				if i < 2 {
					migrates = append(migrates, started{"migrate --table " + table, start(t, env, "migrate", "--table", table)})
				}
			}
			for _, m := range migrates {
				if code := m.p.wait(); code != 0 {
					t.Errorf("pglease %s: exit %d\nstderr: %s", m.label, code, m.p.stderr)
				}
			}
			ran := map[int64]string{}
			for _, r := range runs {
				if code := r.p.wait(); code != 0 {
					t.Errorf("pglease run %s: exit %d\nstdout: %s\nstderr: %s", r.label, code, r.p.stdout, r.p.stderr)
					continue
				}
				out := strings.Fields(r.p.stdout.String())
				if len(out) != 1 {
					t.Errorf("pglease run %s: the command printed %q, want one token: it ran once", r.label, out)
					continue
				}
				tok, err := strconv.ParseInt(out[0], 10, 64)
				if err != nil || tok <= 0 {
					t.Errorf("pglease run %s: token %q, want a positive integer", r.label, out[0])
					continue
				}
				if other, dup := ran[tok]; dup {
					t.Errorf("pglease run %s and %s both got token %d", other, r.label, tok)
				}
				ran[tok] = r.label
			}
			if t.Failed() {
				return
			}
			// The commands ran one after the other (each appended its
			// token to the log while it held the lease), in token order.
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Fields(string(b))
			if len(lines) != len(runs) {
				t.Fatalf("the log holds %d tokens, want %d: %q", len(lines), len(runs), lines)
			}
			var last int64
			for _, l := range lines {
				tok, _ := strconv.ParseInt(l, 10, 64)
				if _, ok := ran[tok]; !ok || tok <= last {
					t.Fatalf("tokens in the order the commands ran: %q, want the runs' tokens, increasing", lines)
				}
				last = tok
			}
		})
	}
}
