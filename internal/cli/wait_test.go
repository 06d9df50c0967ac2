package cli

import (
	"testing"
	"time"
)

// patience bounds every wait of these tests for a signal: a process
// exiting, a file or a line of output appearing, a row changing. It is
// generous on purpose: a test asserts what happens, never how fast, and a
// loaded machine (-race, two cores, parallel tests) may be slow. Running
// into it means the awaited thing did not happen.
const patience = time.Minute

// waitFor polls cond every few milliseconds until it holds, and fails the
// test when it still does not after patience. It is the one poll loop of
// the package's tests.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", patience, what)
		}
		time.Sleep(5 * time.Millisecond) // the poll interval
	}
}
