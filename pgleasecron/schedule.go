package pgleasecron

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// A Schedule gives the instants a job is due at. Every replica must compute
// the same instants: Next depends on its argument alone, never on when it is
// called.
type Schedule interface {
	// Next returns the first instant strictly after t, or the zero time if
	// there is none.
	Next(t time.Time) time.Time
	// String is the schedule as written (see Parse), recorded in the jobs
	// table for people reading it.
	String() string
}

// parser reads 5 fields (minute to day of week) or 6 (seconds first), and
// the descriptors (@hourly …).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads a schedule:
//
//   - a cron expression of 5 fields ("30 3 * * 1-5": minute, hour, day of
//     month, month, day of week) or 6 (seconds first: "*/10 * * * * *");
//   - a descriptor: @yearly (or @annually), @monthly, @weekly, @daily (or
//     @midnight), @hourly;
//   - "@every DURATION" (time.ParseDuration's syntax, at least 1s): the
//     instants that are whole multiples of DURATION since the Unix epoch, so
//     that every replica computes the same ones ("@every 1h" is on the hour,
//     UTC).
//
// A cron expression or descriptor is read in loc (UTC when nil), unless it
// starts with "CRON_TZ=ZONE " (or "TZ=ZONE "), which names its zone (an IANA
// name such as Europe/Berlin). Across a daylight-saving change, a time that
// does not exist that day is skipped, and one that occurs twice runs once
// when the schedule has fixed hours ("30 2 * * *"); one that runs every hour
// goes on through the repeated hour.
func Parse(spec string, loc *time.Location) (Schedule, error) {
	text := strings.Join(strings.Fields(spec), " ")
	if text == "" {
		return nil, invalid("empty schedule: write a cron expression (\"0 3 * * *\"), a descriptor (@hourly) or @every DURATION")
	}
	if loc == nil {
		loc = time.UTC
	}
	expr := text
	if zone, rest, ok := cutZone(text); ok {
		l, err := time.LoadLocation(zone)
		if err != nil || zone == "" || strings.EqualFold(zone, "local") {
			return nil, invalid("schedule %q: unknown time zone %q: use an IANA name such as Europe/Berlin or UTC", text, zone)
		}
		loc, expr = l, rest
		if expr == "" {
			return nil, invalid("schedule %q has a time zone but no expression: %s", text, scheduleSyntax)
		}
	}
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		if expr != text {
			return nil, invalid("schedule %q: @every counts from the Unix epoch and takes no time zone: drop the zone", text)
		}
		return parseEvery(text, d)
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, invalid("invalid schedule %q: %v; %s", text, err, scheduleSyntax)
	}
	cs, ok := s.(*cron.SpecSchedule)
	if !ok { // the parser returns a SpecSchedule for everything but @every
		return nil, invalid("invalid schedule %q: %s", text, scheduleSyntax)
	}
	cs.Location = loc
	if expr == text && loc != time.UTC {
		// Recorded with its zone, so that readers of the jobs table
		// (pglease jobs) compute the same instants.
		text = "CRON_TZ=" + loc.String() + " " + text
	}
	c := cronSchedule{spec: cs, text: text}
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, invalid("schedule %q never fires (a day that does not exist in its months?): check its day-of-month and month fields", text)
	}
	return c, nil
}

// cutZone splits a leading "CRON_TZ=ZONE" or "TZ=ZONE" off text.
func cutZone(text string) (zone, rest string, ok bool) {
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if r, found := strings.CutPrefix(text, prefix); found {
			zone, rest, _ = strings.Cut(r, " ")
			return zone, strings.TrimSpace(rest), true
		}
	}
	return "", "", false
}

// parseEvery reads the duration of "@every DURATION".
func parseEvery(text, d string) (Schedule, error) {
	dur, err := time.ParseDuration(strings.TrimSpace(d))
	if err != nil {
		return nil, invalid("invalid schedule %q: %q is not a duration (examples: 90s, 15m, 1h30m)", text, d)
	}
	if dur < time.Second {
		return nil, invalid("invalid schedule %q: the interval must be at least 1s", text)
	}
	if dur%time.Microsecond != 0 {
		return nil, invalid("invalid schedule %q: the interval must be a whole number of microseconds (the database's precision)", text)
	}
	return every{d: dur, text: text}, nil
}

// Every is the schedule of the instants that are whole multiples of d since
// the Unix epoch (as "@every d"); d must be at least one second.
func Every(d time.Duration) (Schedule, error) {
	return parseEvery("@every "+d.String(), d.String())
}

type every struct {
	d    time.Duration
	text string
}

func (e every) Next(t time.Time) time.Time {
	n := t.UnixNano()
	k := n / int64(e.d)
	if n < 0 && n%int64(e.d) != 0 {
		k-- // floor, not truncation
	}
	return time.Unix(0, (k+1)*int64(e.d)).UTC()
}

func (e every) String() string { return e.text }

type cronSchedule struct {
	spec *cron.SpecSchedule
	text string
}

// Next is the cron schedule's next instant, in UTC. The parser's schedules
// have a resolution of one second and skip to the next second; a t with a
// fraction is still followed by the same instant the whole second gives.
// The parser fires at both instants of a local time that a daylight-saving
// change repeats; a schedule with fixed hours skips the second one.
func (c cronSchedule) Next(t time.Time) time.Time {
	n := c.spec.Next(t.Truncate(time.Second))
	for !n.IsZero() && c.repeated(n) {
		n = c.spec.Next(n)
	}
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// everyHour is the parser's bit set of a schedule that fires in all 24 hours.
const everyHour = 1<<24 - 1

// repeated reports whether n is the second instant of a local time that a
// daylight-saving change repeats (the clock fell back over it), for a
// schedule with fixed hours: as cron does, "30 2 * * *" runs once that
// night, while "*/15 * * * *" goes on through the repeated hour.
func (c cronSchedule) repeated(n time.Time) bool {
	if c.spec.Hour&everyHour == everyHour {
		return false
	}
	loc := c.spec.Location
	_, after := n.In(loc).Zone()
	_, before := n.Add(-12 * time.Hour).In(loc).Zone()
	if before <= after {
		return false
	}
	first := n.Add(-time.Duration(before-after) * time.Second)
	const wall = "2006-01-02 15:04:05"
	return first.In(loc).Format(wall) == n.In(loc).Format(wall)
}

func (c cronSchedule) String() string { return c.text }

// due lists the ticks of s after last and not after now: the newest keep of
// them, oldest first, and how many there are in all (counting stops at
// maxCount, and then the newest ones are found by starting from a day
// before now).
func due(s Schedule, last, now time.Time, keep int) (newest []time.Time, count int) {
	const maxCount = 100_000
	add := func(t time.Time) {
		newest = append(newest, t)
		if len(newest) > keep {
			newest = newest[1:]
		}
	}
	t := last
	for {
		t = s.Next(t)
		if t.IsZero() || t.After(now) {
			return newest, count
		}
		count++
		add(t)
		if count == maxCount {
			break
		}
	}
	// Too many to count: take the newest from later instants.
	for _, back := range []time.Duration{time.Hour, 24 * time.Hour} {
		var found []time.Time
		for u := s.Next(now.Add(-back)); !u.IsZero() && !u.After(now); u = s.Next(u) {
			if !u.After(t) {
				continue
			}
			found = append(found, u)
			if len(found) > keep {
				found = found[1:]
			}
		}
		if len(found) > 0 {
			return found, count
		}
	}
	return newest, count
}
