package cli

import (
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Connection settings come from --dsn, else $PGLEASE_DSN, else
// $DATABASE_URL, else the libpq PG* variables (an empty DSN).
func (e *env) resolveDSN(flagValue string, flagSet bool) string {
	switch {
	case flagSet:
		return flagValue
	case e.getenv("PGLEASE_DSN") != "":
		return e.getenv("PGLEASE_DSN")
	case e.getenv("DATABASE_URL") != "":
		return e.getenv("DATABASE_URL")
	}
	return ""
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
