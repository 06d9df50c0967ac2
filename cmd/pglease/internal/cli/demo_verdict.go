//go:build unix

package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the demo promises for its figures: what pglease's documentation
// promises for a run of 'pglease run --wait --fast-failover' on one host.
const (
	// demoFailoverPromise bounds a takeover after the holder's pglease was
	// SIGKILLed: its session ends and a waiter takes over within a second
	// (fast failover notices a dead session within about 200 ms at worst),
	// timed here until the next job started.
	demoFailoverPromise = time.Second
	// demoHandoffPromise bounds the time from a job's end to the next
	// job's start: the lease is released at once and a waiter starts its
	// command within milliseconds (docs/CLI.md); a second is far above
	// that and below the fallback poll, which a lost wake-up would wait for.
	demoHandoffPromise = time.Second
	// demoGonePromise bounds how long a job outlives its SIGKILLed pglease
	// (its supervisor kills the group within milliseconds: docs/CLI.md).
	demoGonePromise = time.Second
)

// demoReportURL is where a missed promise is to be reported.
const demoReportURL = "https://github.com/pglease/pglease/issues"

// demoKilled reports whether the demo SIGKILLs the k-th holder (from 1)
// mid-job: the first, which got the lease on its first attempt, and the
// third, which got it in a hand-off from the second while others waited;
// the others finish their jobs.
func demoKilled(k int) bool { return k == 1 || k == 3 }

// demoMinWorkers is the smallest cast that has a waiter after each kill.
const demoMinWorkers = 4

// demoTenure is one worker's turn with the lease: its job's run.
type demoTenure struct {
	worker int
	token  string
	pid    int       // the job's, the leader of its process group
	start  time.Time // the job's own stamp when it started
	// end is the job's own stamp when it ended, or when the demo SIGKILLed
	// the worker's pglease; zero while neither happened.
	end    time.Time
	killed bool
	// gone is, for a killed holder, the time from the kill until its job's
	// process group was gone; negative while (or if) it was not seen gone.
	gone time.Duration
}

// demoRun is what one run of the demo saw.
type demoRun struct {
	workers int
	tenures []demoTenure // in the order the demo heard of them
	// problems are what went otherwise than planned, such as a worker
	// that exited with an error.
	problems []string
}

// report returns the summary of a run, a line per figure, and a line for
// each figure that misses what pglease promises (none when all keep it).
func (r *demoRun) report() (summary, misses []string) {
	missf := func(format string, args ...any) { misses = append(misses, fmt.Sprintf(format, args...)) }
	ts := slices.Clone(r.tenures)
	slices.SortStableFunc(ts, func(a, b demoTenure) int { return a.start.Compare(b.start) })

	tokens := make([]string, len(ts))
	var last uint64
	for i, t := range ts {
		tokens[i] = t.token
		v, err := strconv.ParseUint(t.token, 10, 64)
		switch {
		case err != nil || v == 0:
			missf("worker-%d's job got the fencing token %q; pglease promises a positive integer", t.worker, t.token)
		case v <= last:
			missf("worker-%d's fencing token %d is not greater than the earlier %d; pglease promises each holder's token is greater than every earlier one", t.worker, v, last)
		default:
			last = v
		}
	}
	summary = append(summary, fmt.Sprintf("fencing tokens in order: %s (each holder's is greater than every earlier one)", strings.Join(tokens, ", ")))

	for i := 1; i < len(ts); i++ {
		p, c := ts[i-1], ts[i]
		if p.end.IsZero() || c.start.Before(p.end) {
			missf("worker-%d's job started while worker-%d still held the lease; pglease promises one holder at a time", c.worker, p.worker)
			continue
		}
		took := c.start.Sub(p.end)
		if !p.killed {
			summary = append(summary, fmt.Sprintf("hand-off after a job ended (release + notify + next start): %s", ms(took)))
			if took >= demoHandoffPromise {
				missf("the hand-off after worker-%d's job ended took %s; pglease promises a waiter gets the lease at once after a release (under %s)", p.worker, ms(took), demoHandoffPromise)
			}
			continue
		}
		what := "failover after SIGKILL of " + demoHow(ts, i-1)
		summary = append(summary, fmt.Sprintf("%s: %s", what, ms(took)))
		if took >= demoFailoverPromise {
			missf("%s took %s; pglease promises under %s with --fast-failover", what, ms(took), demoFailoverPromise)
		}
	}

	for i, t := range ts {
		switch {
		case demoKilled(i+1) && !t.killed:
			missf("worker-%d's job ended before the demo's SIGKILL came: no failover to measure", t.worker)
		case t.killed && t.gone < 0:
			missf("worker-%d's job was not seen gone after its pglease was SIGKILLed; pglease promises the job dies with pglease (within %s)", t.worker, demoGonePromise)
		case t.killed && t.gone >= demoGonePromise:
			missf("worker-%d's job outlived its SIGKILLed pglease by %s; pglease promises it dies within %s", t.worker, ms(t.gone), demoGonePromise)
		}
	}
	if n := len(ts); n > 0 && ts[n-1].killed {
		missf("nobody took over after worker-%d's pglease was SIGKILLed; pglease promises a waiter takes over within %s with --fast-failover", ts[n-1].worker, demoFailoverPromise)
	}
	if len(ts) < r.workers {
		missf("only %d of the %d workers got the lease; each should, one after the other", len(ts), r.workers)
	}
	misses = append(misses, r.problems...)
	return summary, misses
}

// demoHow names the i-th holder by how it got the lease.
func demoHow(ts []demoTenure, i int) string {
	switch {
	case i == 0:
		return "the first holder"
	case ts[i-1].killed:
		return "a holder that got the lease in a takeover"
	default:
		return "a holder that got the lease in a hand-off"
	}
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
}
