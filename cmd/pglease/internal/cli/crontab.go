package cli

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pglease/pglease/pgleasecron"
)

// The file of pglease cron, a crontab with a name per job:
//
//	# comment
//	CRON_TZ=Europe/Berlin
//	NAME  SCHEDULE  [--missed=… --overlap=… --abandoned=…]  --  COMMAND
//
// NAME is a job name (pgleasecron.CheckJobName); SCHEDULE is what
// pgleasecron.Parse reads (5 or 6 fields, @hourly…, @every 90s, a leading
// CRON_TZ=ZONE); the options, words starting with "--" before the
// separating "--", override the command line's policy flags for the line;
// COMMAND is the rest of the line, run by /bin/sh -c. A CRON_TZ=ZONE line
// sets the zone of the schedules of the lines after it, as cronie does.

// cronJob is one valid line of the file.
type cronJob struct {
	line     int
	name     string
	spec     string               // the schedule as written
	loc      *time.Location       // the zone of a CRON_TZ line before it, or UTC
	sched    pgleasecron.Schedule // spec read in loc
	command  string
	policies cronPolicies
}

// cronPolicies are a job's policies (see package pgleasecron) as the
// flags and line options write them: "run-once", "all:3", "queue"...
type cronPolicies struct{ missed, overlap, abandoned string }

// defaultPolicies are the library's defaults.
var defaultPolicies = cronPolicies{missed: "run-once", overlap: "skip", abandoned: "leave"}

// cronPolicyNames are the policies, as flags and line options, with the
// values they take.
var cronPolicyNames = []struct{ name, values string }{
	{"missed", "run-once, skip or all:N (N at least 1)"},
	{"overlap", "skip or queue"},
	{"abandoned", "leave or retry:N (N from 2 to 100)"},
}

// set sets the policy name ("missed", "overlap", "abandoned") to value.
func (p *cronPolicies) set(name, value string) error {
	if _, err := policyOption(name, value); err != nil {
		return err
	}
	switch name {
	case "missed":
		p.missed = value
	case "overlap":
		p.overlap = value
	default:
		p.abandoned = value
	}
	return nil
}

// options are the library's job options for p, which set has checked.
func (p cronPolicies) options() []pgleasecron.Option {
	var opts []pgleasecron.Option
	for _, kv := range [][2]string{{"missed", p.missed}, {"overlap", p.overlap}, {"abandoned", p.abandoned}} {
		if opt, err := policyOption(kv[0], kv[1]); err == nil {
			opts = append(opts, opt)
		}
	}
	return opts
}

func (p cronPolicies) String() string {
	return fmt.Sprintf("missed=%s overlap=%s abandoned=%s", p.missed, p.overlap, p.abandoned)
}

// policyOption is the library's option for the policy name set to value.
func policyOption(name, value string) (pgleasecron.Option, error) {
	kind, arg, hasArg := strings.Cut(value, ":")
	n, err := strconv.Atoi(arg)
	if hasArg && (err != nil || arg != strconv.Itoa(n)) {
		kind = "" // not a number: refused below
	}
	switch {
	case name == "missed" && value == "run-once":
		return pgleasecron.OnMissed(pgleasecron.RunOnce), nil
	case name == "missed" && value == "skip":
		return pgleasecron.OnMissed(pgleasecron.Skip), nil
	case name == "missed" && kind == "all" && hasArg && n >= 1:
		return pgleasecron.OnMissed(pgleasecron.RunAll(n)), nil
	case name == "overlap" && value == "skip":
		return pgleasecron.OnOverlap(pgleasecron.SkipOverlap), nil
	case name == "overlap" && value == "queue":
		return pgleasecron.OnOverlap(pgleasecron.QueueOverlap), nil
	case name == "abandoned" && value == "leave":
		return pgleasecron.OnAbandoned(pgleasecron.Leave), nil
	case name == "abandoned" && kind == "retry" && hasArg && n >= 2 && n <= 100:
		return pgleasecron.OnAbandoned(pgleasecron.Retry(n)), nil
	}
	for _, p := range cronPolicyNames {
		if p.name == name {
			return nil, fmt.Errorf("invalid --%s=%s: use %s", name, value, p.values)
		}
	}
	return nil, fmt.Errorf("unknown option --%s: a line takes --missed=, --overlap= and --abandoned=", name)
}

// maxCrontab bounds the file: a crontab is small, and a path such as
// /dev/zero must not exhaust memory.
const maxCrontab = 1 << 20

// assignment is a VAR=value line of a crontab.
var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*[ \t]*=`)

// parseCrontab reads the file's text (file names it in the errors) with
// defaults as the policies of lines without options. It returns the jobs
// of the valid lines and one error per invalid line ("FILE:LINE: what is
// wrong: what to do").
func parseCrontab(file string, text string, defaults cronPolicies) ([]cronJob, []error) {
	var jobs []cronJob
	var errs []error
	firstLine := map[string]int{}
	loc := time.UTC
	for i, raw := range strings.Split(text, "\n") {
		n := i + 1
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s:%d: %s", file, n, fmt.Sprintf(format, args...)))
		}
		line := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsRune(line, 0) {
			fail("the line contains a NUL byte: is this a text file?")
			continue
		}
		if assignment.MatchString(line) {
			key, value, _ := strings.Cut(line, "=")
			key = strings.TrimSpace(key)
			if key != "CRON_TZ" {
				fail("%s= lines are not supported (only CRON_TZ=ZONE): set variables in the command (%s=... COMMAND) or in pglease's own environment", key, key)
				continue
			}
			l, err := zoneLine(strings.TrimSpace(value))
			if err != nil {
				fail("%v", err)
				continue
			}
			loc = l
			continue
		}
		job, err := parseJobLine(line, defaults)
		if first, dup := firstLine[job.name]; dup && job.name != "" {
			fail("job %s is defined twice (first on line %d): give each job a name of its own", quoteArg(job.name), first)
			continue
		}
		if job.name != "" {
			firstLine[job.name] = n
		}
		if err != nil {
			fail("%v", err)
			continue
		}
		sched, err := pgleasecron.Parse(job.spec, loc)
		if err != nil {
			fail("job %s: %s", quoteArg(job.name), cronReason(err))
			continue
		}
		jobs = append(jobs, cronJob{line: n, name: job.name, spec: job.spec, loc: loc, sched: sched, command: job.command, policies: job.policies})
	}
	return jobs, errs
}

// zoneLine reads the value of a CRON_TZ= line, optionally quoted.
func zoneLine(value string) (*time.Location, error) {
	if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
		value = value[1 : len(value)-1]
	}
	switch {
	case value == "":
		return nil, errors.New("CRON_TZ= needs a time zone: write CRON_TZ=Europe/Berlin, or CRON_TZ=UTC (the default)")
	case strings.ContainsAny(value, " \t"):
		return nil, fmt.Errorf("CRON_TZ=%s: a CRON_TZ line holds one time zone and nothing else, e.g. CRON_TZ=Europe/Berlin", value)
	}
	loc, err := time.LoadLocation(value)
	if err != nil || strings.EqualFold(value, "local") {
		return nil, fmt.Errorf("unknown time zone %s in CRON_TZ: use an IANA name such as Europe/Berlin or UTC", quoteArg(value))
	}
	return loc, nil
}

// jobLine is a job line split into its parts.
type jobLine struct {
	name, spec, command string
	policies            cronPolicies
}

// parseJobLine splits "NAME SCHEDULE [OPTIONS] -- COMMAND" and checks the
// name and the options; the schedule is left to pgleasecron.Parse.
func parseJobLine(line string, defaults cronPolicies) (jobLine, error) {
	j := jobLine{policies: defaults}
	words, command, found := splitDashDash(line)
	name := words[0]
	switch {
	case !found && classicField.MatchString(name):
		return j, errors.New("this looks like a line of a classic crontab: start it with a job NAME and put \" -- \" before the command: NAME SCHEDULE -- COMMAND")
	case strings.HasPrefix(name, "-"):
		return j, fmt.Errorf("a line starts with the job's NAME, not %s: write NAME SCHEDULE -- COMMAND", quoteArg(name))
	}
	if err := pgleasecron.CheckJobName(name); err != nil {
		return j, errors.New(cronReason(err))
	}
	j.name = name
	if !found {
		return j, fmt.Errorf("no \" -- \" between the schedule and the command of job %s: write NAME SCHEDULE -- COMMAND, e.g. %s @hourly -- ./run.sh", quoteArg(name), name)
	}
	var spec []string
	for _, w := range words[1:] {
		opt, ok := strings.CutPrefix(w, "--")
		if !ok {
			spec = append(spec, w)
			continue
		}
		name, value, hasValue := strings.Cut(opt, "=")
		if !hasValue {
			return j, fmt.Errorf("job %s: option %s needs a value: write --%s=VALUE before the \" -- \"", quoteArg(j.name), quoteArg(w), name)
		}
		if err := j.policies.set(name, value); err != nil {
			return j, fmt.Errorf("job %s: %v", quoteArg(j.name), err)
		}
	}
	if len(spec) == 0 {
		return j, fmt.Errorf("job %s has no schedule: write NAME SCHEDULE -- COMMAND, e.g. %s @hourly -- ./run.sh", quoteArg(j.name), j.name)
	}
	j.spec = strings.Join(spec, " ")
	j.command = command
	if j.command == "" {
		return j, fmt.Errorf("job %s has no command after \"--\": write the command that /bin/sh -c should run", quoteArg(j.name))
	}
	return j, nil
}

// classicField is the first field of a classic crontab line: a minute or
// a descriptor.
var classicField = regexp.MustCompile(`^([0-9*][0-9*,/-]*|@(yearly|annually|monthly|weekly|daily|midnight|hourly|reboot|every))$`)

// splitDashDash splits line at its first word "--": the words before it
// and the rest of the line after it, as written.
func splitDashDash(line string) (words []string, rest string, found bool) {
	for line != "" {
		end := strings.IndexAny(line, " \t")
		if end < 0 {
			end = len(line)
		}
		w := line[:end]
		line = strings.TrimLeft(line[end:], " \t")
		if w == "--" {
			return words, line, true
		}
		words = append(words, w)
	}
	return words, "", false
}

// cronReason is what pgleasecron says is wrong with a value it refused
// (an *pgleasecron.InvalidError's Reason, which says what to do), for a
// message that names the job and the crontab line in the tool's own words.
func cronReason(err error) string {
	var ie *pgleasecron.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}
