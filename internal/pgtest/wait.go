package pgtest

import (
	"testing"
	"time"
)

// Patience bounds a test's wait for a signal. It is generous on purpose:
// tests run with -race on machines of two cores, where a step that takes
// milliseconds alone can take seconds. A wait is for a signal that will come
// unless the code is broken, so this bound only decides how long a broken
// test takes to fail, never whether a working one passes.
const Patience = 20 * time.Second

// Eventually checks cond every few milliseconds until it holds or bound
// passes, and reports whether it held. Use it for states that have no
// signal of their own; prefer a channel the code closes.
func Eventually(bound time.Duration, cond func() bool) bool {
	for end := time.Now().Add(bound); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return cond()
		}
	}
}

// WaitFor fails the test unless cond holds within bound; what names the
// awaited state in the failure.
func WaitFor(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Eventually(bound, cond) {
		t.Fatalf("pgtest: timed out after %s waiting for %s", bound, what)
	}
}

// Receive returns the next value from ch, failing the test if none comes
// within Patience; what names the awaited signal in the failure. A closed
// channel yields its zero value, so Receive also waits for a close, as of a
// Done channel.
func Receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Patience)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("pgtest: timed out after %s waiting for %s", Patience, what)
		var zero T
		return zero
	}
}
