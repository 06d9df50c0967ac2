package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

var soak = flag.Bool("soak", false, "run the long soak (also PGLEASE_SOAK=1)")

// TestSoak runs holder processes on six names under a rotation of every
// fault until at least PGLEASE_SOAK_SECTIONS (default 10,000) critical
// sections were recorded, then checks the whole history. It runs in two
// phases of half the sections each, one per lease mode (plain, then
// fast-failover), on tables of their own, and reports each. Run it with
//
//	PGLEASE_SOAK=1 go test -run TestSoak -timeout 30m -v ./internal/chaos/
func TestSoak(t *testing.T) {
	if !*soak && os.Getenv("PGLEASE_SOAK") == "" {
		t.Skip("soak: set PGLEASE_SOAK=1 or pass -soak")
	}
	target := 10000
	if s := os.Getenv("PGLEASE_SOAK_SECTIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		target = n
	}
	var lines []string
	sections := 0
	bothModes(t, func(t *testing.T, fast bool) {
		rep, line := soakPhase(t, fast, (target+1)/2)
		sections += rep.Sections
		lines = append(lines, line)
	})
	t.Logf("SOAK, %d critical sections in all:\n  %s", sections, strings.Join(lines, "\n  "))
	if sections < target {
		t.Errorf("only %d sections, want %d", sections, target)
	}
}

// soakPhase runs the soak in one lease mode until target sections, and
// returns the history report and a summary line.
func soakPhase(t *testing.T, fast bool, target int) (Report, string) {
	cl := pgtest.RequireCluster(t)
	r := startRun(t, scenario{holders: 4, names: []string{"n1", "n2", "n3", "n4", "n5", "n6"}, proxy: true, fast: fast,
		csMin: 10 * time.Millisecond, csMax: 60 * time.Millisecond})
	r.waitBeliefs(20)
	ttl := r.sc.ttl
	pick := func() *proc {
		ps := r.live()
		return ps[rand.N(len(ps))]
	}
	injected := map[string]int{}
	faults := []struct {
		kind string
		do   func()
	}{
		{"sigkill", func() { r.kill(pick()); r.spawn() }},
		{"sigstop", func() {
			p := pick()
			start := Now()
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(3 * ttl / 2) // the fault lasts longer than the TTL
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			r.addFault("sigstop", start, p.pid())
		}},
		{"partition", func() {
			p := pick()
			start := Now()
			p.proxy.Partition(true)
			time.Sleep(2 * ttl) // the fault lasts twice the TTL
			p.proxy.Partition(false)
			r.addFault("partition", start, p.pid())
		}},
		{"terminate", func() {
			p := pick()
			start := Now()
			pgtest.TerminateBackends(t, "pglease "+p.owner)
			r.addFault("terminate", start, p.pid())
		}},
		{"delay", func() {
			p := pick()
			start := Now()
			p.proxy.SetDelay(time.Duration(rand.N(1500)) * time.Millisecond)
			time.Sleep(2 * ttl) // the fault lasts twice the TTL
			p.proxy.SetDelay(0)
			r.addFault("delay", start, p.pid())
		}},
		{"reset", func() {
			p := pick()
			start := Now()
			p.proxy.ResetAll()
			r.addFault("reset", start, p.pid())
		}},
		{"restart-fast", func() {
			start := Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := cl.Restart(ctx, "fast"); err != nil {
				t.Fatal(err)
			}
			r.addFault("restart-fast", start, 0)
		}},
		{"restart-immediate", func() {
			start := Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := cl.Restart(ctx, "immediate"); err != nil {
				t.Fatal(err)
			}
			r.addFault("restart-immediate", start, 0)
		}},
	}
	begin := time.Now()
	for i := 0; ; i++ {
		ev, _ := LoadDir(r.dir)
		secs, _ := Sections(ev)
		if len(secs) >= target && i >= len(faults) {
			break
		}
		if i%len(faults) == 0 {
			t.Logf("%v: %d sections so far", time.Since(begin).Round(time.Second), len(secs))
		}
		f := faults[i%len(faults)]
		f.do()
		injected[f.kind]++
		r.waitProgress(Now())
		// A random pause, so that the next fault lands at a random point
		// of the holders' sections and renewals.
		time.Sleep(time.Duration(rand.N(1000)) * time.Millisecond)
	}
	rep := r.finish(Options{})
	var kinds []string
	total := 0
	for k, n := range injected {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	byKind := map[string]int{}
	for _, v := range rep.Violations {
		k, _, _ := strings.Cut(v, ":")
		byKind[k]++
	}
	line := fmt.Sprintf("%s: %v, %d critical sections checked (%d beliefs, %d fenced writes), %d faults injected (%s), overlaps %d (allowed in the terminate window %d; window %s), violations %d %v, pauses noticed %d, stale writes rejected %d of %d",
		modeName(fast), time.Since(begin).Round(time.Second), rep.Sections, rep.Beliefs, rep.Writes, total, strings.Join(kinds, ", "),
		byKind["overlap"]+byKind["lease overlap"], rep.AllowedOverl, windowStats(rep.Windows), len(rep.Violations), byKind,
		rep.Resumes, rep.StaleRejected, rep.StaleRejected+rep.StaleAccepted)
	t.Logf("SOAK %s", line)
	if rep.Sections < target {
		t.Errorf("only %d sections, want %d", rep.Sections, target)
	}
	return rep, line
}
