package chaos

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// The seed corpora below run in every plain `go test`; explore further with
//
//	go test -run '^$' -fuzz FuzzLeaseName ./internal/chaos/
//
// (one -fuzz target per run).

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// slotNameRE is the form reserved for the slot names of semaphores.
var slotNameRE = regexp.MustCompile(`(?s)^.+#[0-9]+$`)

func validTable(s string) bool {
	if s == "" {
		return true // the default
	}
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return false
		}
	}
	return true
}

func FuzzLeaseName(f *testing.F) {
	for _, s := range hostileNames {
		f.Add(s)
	}
	for _, s := range []string{"job", "a", strings.Repeat("x", 255), "😀", "a b;'\"--", "\u2028", "\xc0\xaf",
		"job#0", "job#", "#0", "a#1#0", "job#0x", "é#12", "\n#3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		_, err := pglease.Config{}.Plan(name)
		valid := len(name) >= 1 && len(name) <= 255 && utf8.ValidString(name) && !strings.ContainsRune(name, 0) &&
			!slotNameRE.MatchString(name)
		if valid != (err == nil) {
			t.Fatalf("Plan(%q) = %v, valid = %v", name, err, valid)
		}
		if err != nil && !isInvalid(err, "lease name") {
			t.Fatalf("Plan(%q) = %v, is not an invalid lease name error", name, err)
		}
	})
}

// isInvalid reports whether err is a *pglease.InvalidError of kind.
func isInvalid(err error, kind string) bool {
	var ie *pglease.InvalidError
	return errors.As(err, &ie) && ie.Kind == kind
}

func FuzzDDL(f *testing.F) {
	for _, s := range hostileTables {
		f.Add(s)
	}
	for _, s := range []string{"", "leases", "s.t", "_", "select.from", strings.Repeat("t", 63)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, table string) {
		ddl, err := admin.DDL(table)
		if validTable(table) != (err == nil) {
			t.Fatalf("DDL(%q) error %v, valid = %v", table, err, validTable(table))
		}
		if err != nil {
			if !isInvalid(err, "identifier") {
				t.Fatalf("DDL(%q) = %v, is not an invalid identifier error", table, err)
			}
			return
		}
		if table == "" {
			return
		}
		for _, part := range strings.Split(table, ".") {
			if !strings.Contains(ddl, `"`+part+`"`) {
				t.Fatalf("DDL(%q) does not quote %q", table, part)
			}
		}
	})
}

// FuzzOpenConfig: hostile Config values are rejected with the right
// kind of InvalidError before any connection is attempted (the DSN names a closed
// port, so a valid config fails with a connection error instead).
func FuzzOpenConfig(f *testing.F) {
	f.Add("leases", "owner", int64(30000))
	f.Add(`a"b`, "o", int64(0))
	f.Add("s.t", "\xff", int64(1000))
	f.Add("x;drop table y", strings.Repeat("o", 256), int64(-5))
	f.Add("ok", "ok", int64(999))
	f.Add("ok", "a\nb", int64(1000))
	f.Add("ok", "ok", int64(1<<62))
	f.Fuzz(func(t *testing.T, table, owner string, ttlMs int64) {
		ttl := time.Duration(ttlMs) * time.Millisecond
		if ttlMs != 0 && ttl/time.Millisecond != time.Duration(ttlMs) {
			return // overflow: not a duration anyone can write
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := pglease.Open(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1", pglease.Config{Table: table, Owner: owner, TTL: ttl})
		if c != nil {
			c.Close()
			t.Fatal("Open succeeded against a closed port")
		}
		badTable := !validTable(table)
		badOwner := owner != "" && (len(owner) > 255 || !utf8.ValidString(owner) || strings.ContainsFunc(owner, unicode.IsControl))
		badTTL := ttl != 0 && (ttl < time.Second || ttl > 100*365*24*time.Hour)
		switch {
		case badTable:
			if !isInvalid(err, "identifier") {
				t.Fatalf("table %q: %v, want an invalid identifier", table, err)
			}
		case badOwner || badTTL:
			if !isInvalid(err, "owner") && !isInvalid(err, "TTL") {
				t.Fatalf("owner %q ttl %v: %v, want a validation error", owner, ttl, err)
			}
		default:
			for _, kind := range []string{"identifier", "owner", "TTL"} {
				if isInvalid(err, kind) {
					t.Fatalf("valid config (table %q owner %q ttl %v) rejected: %v", table, owner, ttl, err)
				}
			}
		}
	})
}

// FuzzDSNPasswordNotEchoed: whatever the password and however the DSN is
// malformed, Open's error never contains the password.
func FuzzDSNPasswordNotEchoed(f *testing.F) {
	f.Add("s3cr3t-Horse", "127.0.0.1:1", uint8(0))
	f.Add("p'w\\d x", "127.0.0.1:notaport", uint8(1))
	f.Add("pa ss=word", "[::1", uint8(2))
	f.Add("hunter2hunter2", "127.0.0.1:1?sslmode=bogus", uint8(0))
	f.Add("%zz%", "h:1", uint8(3))
	f.Fuzz(func(t *testing.T, pw, hostport string, form uint8) {
		if len(pw) < 8 || strings.ContainsAny(pw, "\x00") {
			return // short strings occur in ordinary error text
		}
		build := func(pw string) string {
			switch form % 4 {
			case 0:
				return "postgres://" + url.UserPassword("app", pw).String() + "@" + hostport + "/db?connect_timeout=1"
			case 1:
				q := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
				return "host=" + hostport + " port=1 user=app password='" + q + "' connect_timeout=1"
			case 2:
				return "postgres://app:" + pw + "@" + hostport + "/db?connect_timeout=1" // unescaped
			default:
				return "postgres://app@" + hostport + "/db?connect_timeout=1&password=" + url.QueryEscape(pw)
			}
		}
		open := func(dsn string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			c, err := pglease.Open(ctx, dsn, pglease.Config{})
			if c != nil {
				c.Close()
			}
			return err
		}
		err := open(build(pw))
		if err == nil || !strings.Contains(err.Error(), pw) {
			return
		}
		// Not an echo if the same error text appears without the password.
		if other := open(build("Zq9-Xw7-Kv5-Jm3")); other != nil && strings.Contains(other.Error(), pw) {
			return
		}
		t.Fatalf("error echoes the password %q: %v", pw, err)
	})
}
