package pgleasecron

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		spec, after, want, text string
	}{
		{"0 3 * * *", "2026-03-01T10:00:00Z", "2026-03-02T03:00:00Z", "0 3 * * *"},
		{"  0   3 * * * ", "2026-03-01T02:59:59.5Z", "2026-03-01T03:00:00Z", "0 3 * * *"},
		{"*/10 * * * * *", "2026-03-01T10:00:05Z", "2026-03-01T10:00:10Z", "*/10 * * * * *"},
		{"@hourly", "2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z", "@hourly"},
		{"@daily", "2026-03-01T10:00:00Z", "2026-03-02T00:00:00Z", "@daily"},
		{"CRON_TZ=Europe/Berlin 0 3 * * *", "2026-07-01T00:00:00Z", "2026-07-01T01:00:00Z", "CRON_TZ=Europe/Berlin 0 3 * * *"},
		{"TZ=America/New_York 0 9 * * 1-5", "2026-03-06T15:00:00Z", "2026-03-09T13:00:00Z", "TZ=America/New_York 0 9 * * 1-5"},
		// @every counts from the epoch: every replica gets the same instants.
		{"@every 1s", "2026-03-01T10:00:00.4Z", "2026-03-01T10:00:01Z", "@every 1s"},
		{"@every 1h", "2026-03-01T10:20:00Z", "2026-03-01T11:00:00Z", "@every 1h"},
		{"@every 90s", "2026-03-01T10:00:00Z", "2026-03-01T10:01:30Z", "@every 90s"},
	} {
		s, err := Parse(tc.spec, nil)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.spec, err)
			continue
		}
		if got := s.Next(at(tc.after)); !got.Equal(at(tc.want)) {
			t.Errorf("Parse(%q).Next(%s) = %s, want %s", tc.spec, tc.after, got, tc.want)
		}
		if s.String() != tc.text {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.spec, s.String(), tc.text)
		}
	}

	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone data:", err)
	}
	s, err := Parse("0 3 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next(at("2026-01-01T00:00:00Z")); !got.Equal(at("2026-01-01T02:00:00Z")) {
		t.Errorf("0 3 * * * in Berlin: %s", got)
	}
	if s.String() != "CRON_TZ=Europe/Berlin 0 3 * * *" {
		t.Errorf("a location given apart is recorded with the expression: %q", s.String())
	}

	// Daylight saving in Berlin: 02:30 does not exist on 2026-03-29 and
	// occurs twice on 2026-10-25 (00:30 and 01:30 UTC).
	s, err = Parse("30 2 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ after, want string }{
		{"2026-03-28T12:00:00Z", "2026-03-30T00:30:00Z"}, // the missing time is skipped
		{"2026-10-24T12:00:00Z", "2026-10-25T00:30:00Z"},
		{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}, // the repeated time runs once
	} {
		if got := s.Next(at(tc.after)); !got.Equal(at(tc.want)) {
			t.Errorf("30 2 * * * in Berlin after %s: %s, want %s", tc.after, got, tc.want)
		}
	}
	// A schedule of every hour goes on through the repeated hour.
	s, err = Parse("0 * * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next(at("2026-10-25T00:00:00Z")); !got.Equal(at("2026-10-25T01:00:00Z")) {
		t.Errorf("0 * * * * in Berlin, in the repeated hour: %s", got)
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"", "empty schedule"},
		{"   ", "empty schedule"},
		{"* * *", "invalid schedule"},
		{"61 * * * *", "invalid schedule"},
		{"0 3 * * * * *", "invalid schedule"},
		{"@fortnightly", "invalid schedule"},
		{"@every", "invalid schedule"},
		{"@every soon", "not a duration"},
		{"@every 500ms", "at least 1s"},
		{"@every -5s", "at least 1s"},
		{"CRON_TZ=Mars/Olympus 0 3 * * *", "unknown time zone"},
		{"CRON_TZ=Local 0 3 * * *", "unknown time zone"},
		{"CRON_TZ=UTC", "no expression"},
		{"CRON_TZ=UTC @every 1m", "takes no time zone"},
		{"0 0 30 2 *", "never fires"},
	} {
		_, err := Parse(tc.spec, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.spec, err, tc.want)
		}
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Job != "" || "pgleasecron: "+ie.Reason != err.Error() {
			t.Errorf("Parse(%q) = %#v, want an *InvalidError whose Reason is its message without the prefix", tc.spec, err)
		}
	}
}

func TestDue(t *testing.T) {
	s := every{d: time.Second, text: "@every 1s"}
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	ticks, n := due(s, base, base.Add(2500*time.Millisecond), 5)
	if n != 2 || len(ticks) != 2 || !ticks[0].Equal(base.Add(time.Second)) || !ticks[1].Equal(base.Add(2*time.Second)) {
		t.Errorf("due: %v, %d", ticks, n)
	}
	ticks, n = due(s, base, base.Add(10*time.Second), 3)
	if n != 10 || len(ticks) != 3 || !ticks[2].Equal(base.Add(10*time.Second)) || !ticks[0].Equal(base.Add(8*time.Second)) {
		t.Errorf("due keeps the newest: %v, %d", ticks, n)
	}
	if ticks, n = due(s, base, base.Add(999*time.Millisecond), 1); n != 0 || len(ticks) != 0 {
		t.Errorf("nothing due: %v, %d", ticks, n)
	}
	// More ticks than it counts: the newest are still found.
	ticks, n = due(s, base, base.Add(200*time.Hour), 1)
	if n != 100_000 || len(ticks) != 1 || !ticks[0].Equal(base.Add(200*time.Hour)) {
		t.Errorf("a long outage: %v, %d", ticks, n)
	}
}
