package cli

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Connection settings come from --dsn, else $PGLEASE_DSN, else
// $DATABASE_URL, else the libpq PG* variables (an empty DSN).
func (e *env) resolveDSN(flagValue string, flagSet bool) string {
	switch {
	case flagSet:
		e.dsnFrom = "--dsn"
		return flagValue
	case e.getenv("PGLEASE_DSN") != "":
		e.dsnFrom = "$PGLEASE_DSN"
		return e.getenv("PGLEASE_DSN")
	case e.getenv("DATABASE_URL") != "":
		e.dsnFrom = "$DATABASE_URL"
		return e.getenv("DATABASE_URL")
	}
	e.dsnFrom = ""
	return ""
}

// libpqVars are the libpq variables that choose a server, a database or
// a role.
var libpqVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE"}

// noteDefaults says on stderr which server an administrative command
// reads when nothing chose one (no --dsn, $PGLEASE_DSN, $DATABASE_URL or
// libpq variable): libpq's defaults may reach a local server that is not
// the one meant, and "no leases" from it would mislead.
func (e *env) noteDefaults() {
	if e.dsnFrom != "" {
		return
	}
	for _, v := range libpqVars {
		if e.getenv(v) != "" {
			return
		}
	}
	fmt.Fprintf(e.stderr, "pglease: note: no --dsn, $PGLEASE_DSN, $DATABASE_URL or PG* variable is set: using libpq's defaults, %s\n", e.server)
}

// describeServer is where cfg leads, for messages: "database D on
// HOST:PORT as USER" (a Unix socket's directory as HOST).
func describeServer(cfg *pgconn.Config) string {
	host := cfg.Host
	if !strings.HasPrefix(host, "/") {
		host = net.JoinHostPort(host, strconv.Itoa(int(cfg.Port)))
	} else {
		host = fmt.Sprintf("%s/.s.PGSQL.%d", host, cfg.Port)
	}
	db := cfg.Database
	if db == "" { // the server's default: the role's name
		db = cfg.User
	}
	return fmt.Sprintf("database %s on %s as %s", db, host, cfg.User)
}

// checkDSN parses dsn (and the PG* variables it falls back on) without
// connecting, so that a malformed DSN is a usage error, and remembers its
// password so that no output ever shows it.
func (e *env) checkDSN(dsn string) error {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return usagef("invalid connection string: %s", e.redact(err.Error()))
	}
	if cfg.Password != "" {
		e.secrets = append(e.secrets, cfg.Password)
	}
	e.server = describeServer(cfg)
	return nil
}

var (
	// postgres://user:secret@host → postgres://user:xxxxx@host
	urlPassword = regexp.MustCompile(`(?i)(postgres(?:ql)?://[^:@/\s]*:)[^@\s]*@`)
	// password=secret or password='se cret' in keyword/value strings
	kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)
)

// redact removes passwords from s: those of URLs and keyword/value strings,
// $PGPASSWORD and the password of the DSN in use.
func (e *env) redact(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}xxxxx@")
	s = kvPassword.ReplaceAllString(s, "${1}xxxxx")
	secrets := e.secrets
	if p := e.getenv("PGPASSWORD"); p != "" {
		secrets = append(secrets, p)
	}
	for _, p := range secrets {
		if len(p) >= 3 { // shorter ones would redact ordinary text
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}

// withoutConnectionVars is the environment without the connection variables
// of the user's own database (PG*, DATABASE_URL), for processes that must
// reach another one: the demo's workers.
func withoutConnectionVars() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
