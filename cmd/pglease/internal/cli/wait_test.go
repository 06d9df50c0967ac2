package cli

import (
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// patience bounds every wait of these tests for a signal: a process
// exiting, a file or a line of output appearing, a row changing. It is
// generous on purpose: a test asserts what happens, never how fast, and a
// loaded machine (-race, two cores, parallel tests) may be slow. Running
// into it means the awaited thing did not happen.
const patience = time.Minute

// waitFor fails the test unless cond holds within patience.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	pgtest.WaitFor(t, patience, what, cond)
}
