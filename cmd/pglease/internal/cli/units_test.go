package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease"
)

func TestParseFlagsAnyOrder(t *testing.T) {
	for _, args := range [][]string{
		{"job", "--ttl", "5s", "--wait", "--", "echo", "--ttl"},
		{"--ttl=5s", "job", "-wait", "--", "echo", "--ttl"},
		{"--wait=true", "--ttl", "5s", "job", "--", "echo", "--ttl"},
	} {
		fs, err := parseFlags(runFlags, args)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !slices.Equal(fs.args, []string{"job"}) || !slices.Equal(fs.rest, []string{"echo", "--ttl"}) ||
			fs.duration("ttl", 0) != 5*time.Second || !fs.boolean("wait") {
			t.Errorf("%v: parsed %+v", args, fs)
		}
	}
	if fs, _ := parseFlags(runFlags, []string{"job", "--help", "--bogus"}); !fs.help {
		t.Error("--help not seen")
	}
}

func TestRedact(t *testing.T) {
	e := &env{getenv: func(k string) string {
		if k == "PGPASSWORD" {
			return "envpass"
		}
		return ""
	}}
	if err := e.checkDSN("postgres://u:dsnpass@h/db"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"postgres://bob:hunter2@db:5432/x failed",
		"postgresql://bob:hunter2@db/x",
		"host=db password=hunter2 user=bob",
		"host=db password='hunter 2' user=bob",
		"connect failed for dsnpass",
		"PGPASSWORD envpass leaked",
	} {
		got := e.redact(s)
		for _, secret := range []string{"hunter", "dsnpass", "envpass"} {
			if strings.Contains(got, secret) {
				t.Errorf("redact(%q) = %q", s, got)
			}
		}
	}
	if got := e.redact("postgres://bob@db/x"); got != "postgres://bob@db/x" {
		t.Errorf("redacted a DSN without password: %q", got)
	}
}

func TestDisplay(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain-name", "plain-name"},
		{"tab\there", `"tab\there"`},
		{"esc\x1b[31m", `"esc\x1b[31m"`},
		{"bad\xffutf8", `"bad\xffutf8"`},
		{"quote\"d", `"quote\"d"`},
		{"ünïcode", "ünïcode"},
	} {
		if got := display(tc.in, 64); got != tc.want {
			t.Errorf("display(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := display(strings.Repeat("x", 10), 8); got != "xxxxxxx…" {
		t.Errorf("long name shown as %q", got)
	}
}

func TestChildEnv(t *testing.T) {
	env := childEnv([]string{"A=1", "PGLEASE_TOKEN=999", "PGLEASE_NAME=old", "PGLEASE_SLOT=3", "PGLEASE_DSN=keep"},
		[]string{"PGLEASE_NAME=job", "PGLEASE_OWNER=me", "PGLEASE_TOKEN=42"})
	want := []string{"A=1", "PGLEASE_DSN=keep", "PGLEASE_NAME=job", "PGLEASE_OWNER=me", "PGLEASE_TOKEN=42"}
	if !slices.Equal(env, want) {
		t.Errorf("childEnv = %v, want %v", env, want)
	}
}

// The kill grace must leave room for the first renewal; every default
// grace does.
func TestCheckGrace(t *testing.T) {
	sched := func(ttl time.Duration) pglease.Plan {
		s, err := (pglease.Config{}).Plan("job", pglease.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		ttl, grace time.Duration
		ok         bool
	}{
		{10 * time.Second, 3666 * time.Millisecond, true},
		{10 * time.Second, 3667 * time.Millisecond, false},
		{10 * time.Second, 4900 * time.Millisecond, false},
		{30 * time.Second, 13 * time.Second, true},
		{30 * time.Second, 13*time.Second + time.Millisecond, false},
		{time.Second, 300 * time.Millisecond, true},
		{time.Second, 301 * time.Millisecond, false},
		{10 * time.Second, 0, false},
		{10 * time.Second, -time.Second, false},
	} {
		if err := checkGrace(tc.grace, sched(tc.ttl)); (err == nil) != tc.ok {
			t.Errorf("TTL %s, grace %s: %v, want ok=%v", tc.ttl, tc.grace, err, tc.ok)
		}
	}
	for _, ttl := range []time.Duration{time.Second, 1500 * time.Millisecond, 3 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, time.Hour, 24 * time.Hour} {
		if err := checkGrace(defaultGrace(ttl), sched(ttl)); err != nil {
			t.Errorf("the default grace of a %s TTL is refused: %v", ttl, err)
		}
	}
}
