//go:build unix

package cli

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// demoRunMet is a run of four workers that keeps every promise: the first
// holder is killed and a waiter takes over in 85ms, which hands the lease on
// in 70ms to the third holder, killed too, and the fourth takes over in 60ms.
func demoRunMet() *demoRun {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	return &demoRun{workers: 4, tenures: []demoTenure{
		{worker: 3, token: "1", start: at(0), end: at(400), killed: true, gone: 6 * time.Millisecond},
		{worker: 2, token: "11", start: at(485), end: at(1485)},
		{worker: 4, token: "12", start: at(1555), end: at(1955), killed: true, gone: 4 * time.Millisecond},
		{worker: 1, token: "13", start: at(2015), end: at(3015)},
	}}
}

func TestDemoReportMet(t *testing.T) {
	want := []string{
		"fencing tokens in order: 1, 11, 12, 13 (each holder's is greater than every earlier one)",
		"failover after SIGKILL of the first holder: 85.0ms",
		"hand-off after a job ended (release + notify + next start): 70.0ms",
		"failover after SIGKILL of a holder that got the lease in a hand-off: 60.0ms",
	}
	inOrder, heardLate := demoRunMet(), demoRunMet()
	// The demo may hear of a start before the end before it (two pipes).
	heardLate.tenures[1], heardLate.tenures[2] = heardLate.tenures[2], heardLate.tenures[1]
	for _, r := range []*demoRun{inOrder, heardLate} {
		summary, misses := r.report()
		if len(misses) != 0 {
			t.Errorf("misses of a run that keeps every promise: %q", misses)
		}
		if !slices.Equal(summary, want) {
			t.Errorf("summary:\n%s\nwant:\n%s", strings.Join(summary, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestDemoReportMissed: each way a run can miss a promise gets a line of
// its own naming the figure and the promise, and a kept figure none.
func TestDemoReportMissed(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name   string
		change func(r *demoRun)
		want   []string // pieces of the lines of misses
		lines  int      // how many lines
	}{
		{"SlowFailoverAfterHandOff", func(r *demoRun) {
			r.tenures[3].start = r.tenures[2].end.Add(ms(3533))
			r.tenures[3].end = r.tenures[3].start.Add(time.Second)
		}, []string{"failover after SIGKILL of a holder that got the lease in a hand-off took 3533.0ms", "pglease promises under 1s with --fast-failover"}, 1},
		{"FailoverAtThePromise", func(r *demoRun) {
			r.tenures[1].start = r.tenures[0].end.Add(time.Second)
		}, []string{"failover after SIGKILL of the first holder took 1000.0ms", "under 1s"}, 1},
		{"SlowHandOff", func(r *demoRun) {
			for i := 2; i < len(r.tenures); i++ {
				r.tenures[i].start = r.tenures[i].start.Add(ms(4940))
				r.tenures[i].end = r.tenures[i].end.Add(ms(4940))
			}
		}, []string{"hand-off after worker-2's job ended took 5010.0ms", "under 1s"}, 1},
		{"TokenNotIncreasing", func(r *demoRun) { r.tenures[2].token = "11" },
			[]string{"worker-4's fencing token 11 is not greater than the earlier 11", "greater than every earlier one"}, 1},
		{"TokenNotANumber", func(r *demoRun) { r.tenures[1].token = "" },
			[]string{`worker-2's job got the fencing token ""`, "positive integer"}, 1},
		{"TwoHolders", func(r *demoRun) { r.tenures[2].start = r.tenures[1].end.Add(-ms(1)) },
			[]string{"worker-4's job started while worker-2 still held the lease", "one holder at a time"}, 1},
		{"JobOutlivedTheKill", func(r *demoRun) { r.tenures[0].gone = ms(1500) },
			[]string{"worker-3's job outlived its SIGKILLed pglease by 1500.0ms", "within 1s"}, 1},
		{"JobNotSeenGone", func(r *demoRun) { r.tenures[2].gone = -1 },
			[]string{"worker-4's job was not seen gone"}, 1},
		{"KillTooLate", func(r *demoRun) { r.tenures[0].killed, r.tenures[0].gone = false, 0 },
			[]string{"worker-3's job ended before the demo's SIGKILL came"}, 1},
		{"NobodyTookOver", func(r *demoRun) { r.tenures = r.tenures[:3] },
			[]string{"nobody took over after worker-4's pglease was SIGKILLed", "only 3 of the 4 workers got the lease"}, 2},
		{"TimedOut", func(r *demoRun) {
			r.tenures = r.tenures[:2]
			r.tenures[1].end = time.Time{}
			r.problems = append(r.problems, "the demo timed out before every worker had run its job")
		}, []string{"only 2 of the 4 workers got the lease", "the demo timed out"}, 2},
		{"WorkerFailed", func(r *demoRun) {
			r.problems = append(r.problems, "worker-1: pglease exited with status 125; each worker should run its job once and exit with status 0")
		}, []string{"worker-1: pglease exited with status 125"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := demoRunMet()
			tc.change(r)
			_, misses := r.report()
			got := strings.Join(misses, "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("misses lack %q:\n%s", w, got)
				}
			}
			if len(misses) != tc.lines {
				t.Errorf("%d misses, want %d:\n%s", len(misses), tc.lines, got)
			}
		})
	}
}
