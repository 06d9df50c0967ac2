package pgtest

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// ignoredStacks marks goroutines that belong to the runtime or the testing
// package rather than to the code under test.
var ignoredStacks = []string{
	"pgtest.interestingGoroutines",
	"testing.Main(",
	"testing.tRunner(",
	"testing.(*M).",
	"testing.runTests",
	"created by runtime.gc",
	"created by runtime/trace",
	"runtime.MHeap_Scavenger",
	"runtime.ensureSigM",
	"signal.signal_recv",
	"os/signal.loop",
	"sigterm.handler",
	"runtime_mcall",
	"goroutine in C code",
}

// interestingGoroutines returns the stacks of goroutines other than the
// caller and runtime/testing internals.
func interestingGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []string
outer:
	for _, g := range strings.Split(string(buf), "\n\n") {
		_, stack, ok := strings.Cut(g, "\n")
		stack = strings.TrimSpace(stack)
		if !ok || stack == "" {
			continue
		}
		for _, ign := range ignoredStacks {
			if strings.Contains(stack, ign) {
				continue outer
			}
		}
		gs = append(gs, strings.TrimSpace(g))
	}
	sort.Strings(gs)
	return gs
}

// CheckLeakedGoroutines waits up to 5 s for stray goroutines to exit. If
// some remain it prints their stacks to stderr and reports true.
func CheckLeakedGoroutines() bool {
	var gs []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if gs = interestingGoroutines(); len(gs) == 0 {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "pgtest: %d goroutine(s) leaked after the tests:\n\n%s\n",
		len(gs), strings.Join(gs, "\n\n"))
	return true
}
