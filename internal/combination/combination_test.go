package combination

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/linhist"
)

// Environment of TestCombination.
const (
	EnvSeed  = "PGLEASE_COMBO_SEED"  // run this one seed
	EnvSeeds = "PGLEASE_COMBO_SEEDS" // how many seeds (default 3; 40 with PGLEASE_SOAK)
	EnvSteps = "PGLEASE_COMBO_STEPS" // steps per sequence (default 30; 60 with PGLEASE_SOAK)
	EnvSoak  = "PGLEASE_SOAK"
	// EnvVerbose logs every sequence's steps, not only a failing one's.
	EnvVerbose = "PGLEASE_COMBO_VERBOSE"
	// EnvShrink bounds the time spent shrinking a failing seed, in
	// seconds (default 45; 300 with PGLEASE_SOAK; 0: do not shrink).
	EnvShrink = "PGLEASE_COMBO_SHRINK"
	// EnvUpgrade set to 1 makes every sequence begin with agents of the
	// previous release and upgrade the table under them, set to 0 none
	// (default: one sequence in four, as the seed chooses).
	EnvUpgrade = "PGLEASE_COMBO_UPGRADE"
)

// TestCombination runs random sequences of modes, topologies and faults,
// one per seed, each against a fresh table, and checks each history
// (Check). A failing seed is shrunk to the shortest failing sequence found
// in a bounded time, and printed with its seed. At the end it logs the
// figures of every sequence: steps, faults, violations, and the
// takeover and hand-off latencies per topology.
//
//	go test -run TestCombination -v ./internal/combination/                        # 3 seeds × 30 steps
//	PGLEASE_COMBO_SEED=7 go test -run TestCombination -v ./internal/combination/   # one seed again
//	PGLEASE_SOAK=1 go test -run TestCombination -timeout 90m -v ./internal/combination/
func TestCombination(t *testing.T) {
	seeds, steps, shrinkFor := plan(t)
	var fig Figures
	fig.Seeds = seeds
	shrunk := map[string]bool{} // violation kinds already shrunk in this run
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := newGenerator(seed, short.Agents)
			cfg := short
			switch os.Getenv(EnvUpgrade) {
			case "1":
				g.old = 2
			case "0":
				g.old = 0
			}
			if g.old > 0 {
				if _, took, err := oldAgentBinary(); err != nil {
					t.Logf("seed %d: no upgrade under agents of release %s, which cannot be built here: %v", seed, oldRelease, err)
					g.old = 0
				} else {
					cfg.Old = g.old
					t.Logf("seed %d: begins with %d agents of release %s (schema version 10), upgraded under them (the agent's build took %v, once per run)",
						seed, cfg.Old, oldRelease, took.Round(time.Millisecond))
				}
			}
			n := 0
			h, rep := runSequence(t, cfg, func(s *sequence) (Step, bool) {
				n++
				return g.next(s), n <= steps
			})
			fig.Add(h, rep)
			save(t, fmt.Sprintf("combination-seed-%d", seed), h)
			if rep.OK() {
				t.Logf("seed %d: %d steps, no violation", seed, len(h.Steps))
				if os.Getenv(EnvVerbose) != "" {
					t.Logf("the sequence:\n%s", steplist(h))
				}
				return
			}
			t.Errorf("seed %d: %s", seed, failure(h, rep))
			if shrinkFor > 0 {
				t.Log(shrink(t, cfg, h, rep, shrunk, shrinkFor))
			}
		})
	}
	t.Logf("\n%s", fig.String())
}

// plan reads the environment: which seeds, how many steps each, and how
// long to spend shrinking a failing one.
func plan(t *testing.T) (seeds []uint64, steps int, shrinkFor time.Duration) {
	soak := os.Getenv(EnvSoak) != ""
	n, steps, shrinkFor := 3, 30, 45*time.Second
	if soak {
		n, steps, shrinkFor = 40, 60, 5*time.Minute
	}
	atoi := func(env string, def int) int {
		v := os.Getenv(env)
		if v == "" {
			return def
		}
		x, err := strconv.Atoi(v)
		if err != nil || x < 0 {
			t.Fatalf("%s=%q: want a number", env, v)
		}
		return x
	}
	n, steps = atoi(EnvSeeds, n), atoi(EnvSteps, steps)
	shrinkFor = time.Duration(atoi(EnvShrink, int(shrinkFor/time.Second))) * time.Second
	if v := os.Getenv(EnvSeed); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a number", EnvSeed, v)
		}
		return []uint64{seed}, steps, shrinkFor
	}
	// New seeds every run, printed, so that CI keeps exploring; a failure
	// names its seed and its shortest sequence.
	base := uint64(time.Now().UnixNano()/1000) % 1_000_000
	for i := range n {
		seeds = append(seeds, base+uint64(i))
	}
	return seeds, steps, shrinkFor
}

// runSequence runs the steps next gives (until it says stop) in a new
// sequence and checks the history.
func runSequence(t *testing.T, cfg config, next func(*sequence) (Step, bool)) (*History, Report) {
	t.Helper()
	s := newSequence(t, cfg)
	for {
		st, ok := next(s)
		if !ok {
			break
		}
		s.run(st)
	}
	h := s.finish()
	return h, Check(h, bounds)
}

// runSteps runs a fixed list of steps.
func runSteps(t *testing.T, cfg config, steps []Step) (*History, Report) {
	i := 0
	return runSequence(t, cfg, func(*sequence) (Step, bool) {
		i++
		if i > len(steps) {
			return Step{}, false
		}
		return steps[i-1], true
	})
}

// executed returns the steps a history ran.
func executed(h *History) []Step {
	var out []Step
	for _, r := range h.Steps {
		out = append(out, r.Step)
	}
	return out
}

// failure describes a failed sequence: its violations (the first ten)
// and its steps with the moment each began.
func failure(h *History, rep Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d violations %v:\n", len(rep.Violations), rep.Kinds())
	for i, v := range rep.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "  … and %d more\n", len(rep.Violations)-10)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	if h.Upgrade != 0 {
		fmt.Fprintf(&b, "(config.Old: agents of release %s in the first slots created the table; the others arrived with the upgrade)\n", oldRelease)
	}
	b.WriteString("the sequence (after its agents connected and created the table at once):\n")
	b.WriteString(steplist(h))
	return b.String()
}

// steplist lists the steps a history ran, with when each began and how
// long it took.
func steplist(h *History) string {
	var b strings.Builder
	for i, r := range h.Steps {
		fmt.Fprintf(&b, "  %3d. +%.3fs %s (%v)\n", i+1, time.Duration(r.Start-h.Begin).Seconds(), r.Step, time.Duration(r.End-r.Start).Round(time.Millisecond))
	}
	return b.String()
}

// shrink looks, for each kind of violation the sequence showed and no
// earlier sequence of the run was shrunk for (the first three), for a
// shorter sequence that shows it too, sharing the time budget between
// them.
func shrink(t *testing.T, cfg config, h *History, rep Report, shrunk map[string]bool, budget time.Duration) string {
	var firsts []Violation
	for _, v := range rep.Violations {
		if !shrunk[v.Kind] && len(firsts) < 3 {
			shrunk[v.Kind] = true
			firsts = append(firsts, v)
		}
	}
	if len(firsts) == 0 {
		return "shrinking: every kind of violation here was shrunk in an earlier sequence of this run"
	}
	var out []string
	for _, v := range firsts {
		out = append(out, shrinkTo(t, cfg, h, v, budget/time.Duration(len(firsts))))
	}
	return strings.Join(out, "\n")
}

// shrinkTo looks for the shortest sequence that fails with a violation of
// want's kind: first the prefix up to the step in which want happened,
// then with chunks of steps dropped, halving the chunk, as long as the
// time allows. Each try runs the steps again against a new table.
func shrinkTo(t *testing.T, cfg config, h *History, want Violation, budget time.Duration) string {
	deadline := time.Now().Add(budget)
	runs := 0
	fails := func(steps []Step) bool {
		runs++
		_, r := runSteps(t, cfg, steps)
		return slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Kind == want.Kind })
	}
	steps := executed(h)
	cut := 0
	for i, r := range h.Steps {
		if r.Start <= want.At {
			cut = i + 1
		}
	}
	switch {
	case fails(steps[:cut]):
		steps = steps[:cut]
	case cut < len(steps) && fails(steps):
	default:
		return fmt.Sprintf("shrinking: no %s violation when the sequence ran again (%d runs); the sequence above is the shortest known", want.Kind, runs)
	}
	for chunk := max(len(steps)/2, 1); time.Now().Before(deadline); chunk /= 2 {
		for i := 0; i < len(steps) && time.Now().Before(deadline); {
			cand := append(slices.Clone(steps[:i]), steps[min(i+chunk, len(steps)):]...)
			if fails(cand) {
				steps = cand
			} else {
				i += chunk
			}
		}
		if chunk == 1 {
			break
		}
	}
	with := ""
	if cfg.Old > 0 {
		with = fmt.Sprintf(", with config.Old = %d (the regression cases' upgrading)", cfg.Old)
	}
	return fmt.Sprintf("shortest sequence found that shows a %q violation (%d steps, %d runs%s):\n%s", want.Kind, len(steps), runs, with, Listing(steps))
}

// save writes a history for the external linearizability checker when
// PGLEASE_HISTORY_DIR is set.
func save(t *testing.T, name string, h *History) {
	dir := linhist.Dir()
	if dir == "" {
		return
	}
	if _, err := linhist.Save(dir, name, RegisterOps(h)); err != nil {
		t.Errorf("writing the history: %v", err)
	}
}
