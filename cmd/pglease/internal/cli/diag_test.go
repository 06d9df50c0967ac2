package cli

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// stuckSink blocks every Write until open is closed, then records it.
type stuckSink struct {
	open    chan struct{}
	entered chan struct{} // receives when a Write begins
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (s *stuckSink) Write(p []byte) (int, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.open
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *stuckSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// A stderr that blocks never blocks a Write: the lines wait in a bounded
// queue, those that do not fit are dropped and counted, and once the sink
// takes writes again the queue goes out followed by the count.
func TestDiagWriterNeverBlocks(t *testing.T) {
	sink := &stuckSink{open: make(chan struct{}), entered: make(chan struct{}, 1)}
	d := newDiagWriter(sink)
	line := strings.Repeat("x", 99) + "\n" // 100 bytes
	n := 2 * diagQueue / len(line)         // twice what the queue holds
	fmt.Fprint(d, line)
	<-sink.entered
	waitFor(t, "the write to count as stuck", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.stuck()
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i < n; i++ {
			if _, err := fmt.Fprint(d, line); err != nil {
				t.Error(err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatalf("%d writes of a line did not return in %s while the sink was blocked", n, patience)
	}
	close(sink.open)
	// The count goes out after the first line that does, while the rest
	// of the queue is still being written: wait for all of it.
	waitFor(t, "the count of dropped lines and the queue written out", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.size == 0 && strings.Contains(sink.String(), "were dropped")
	})
	out := sink.String()
	kept := strings.Count(out, line)
	var dropped int
	if _, err := fmt.Sscanf(out[strings.LastIndex(out, "pglease: "):], "pglease: %d line(s)", &dropped); err != nil {
		t.Fatalf("no count in %q: %v", out[strings.LastIndex(out, "pglease: "):], err)
	}
	if kept+dropped != n || kept > diagQueue/len(line) || kept == 0 {
		t.Fatalf("%d lines written out and %d counted as dropped, of %d; the queue holds %d", kept, dropped, n, diagQueue/len(line))
	}
	// Once the sink is free, lines go out again.
	fmt.Fprint(d, "after\n")
	d.close(patience)
	if !strings.HasSuffix(sink.String(), "after\n") {
		t.Fatalf("a line after the sink recovered did not go out: %q", sink.String()[len(out):])
	}
	t.Logf("%d of %d lines written out, %d dropped and counted", kept, n, dropped)
}

// failingSink fails every Write and counts them.
type failingSink struct {
	mu     sync.Mutex
	writes int
}

func (s *failingSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return 0, errors.New("EIO")
}

// A failing stderr is tried once per line, never in a loop.
func TestDiagWriterDoesNotRetryAFailedWrite(t *testing.T) {
	sink := &failingSink{}
	d := newDiagWriter(sink)
	for i := 0; i < 5; i++ {
		fmt.Fprintf(d, "line %d\n", i)
	}
	d.close(patience) // returns once the queue is empty
	sink.mu.Lock()
	writes := sink.writes
	sink.mu.Unlock()
	if writes != 5 {
		t.Fatalf("%d writes for 5 lines, want 5", writes)
	}
}

// close waits for a stuck sink no longer than it is told.
func TestDiagWriterCloseIsBounded(t *testing.T) {
	sink := &stuckSink{open: make(chan struct{})}
	defer close(sink.open)
	d := newDiagWriter(sink)
	fmt.Fprintln(d, "stuck")
	closed := make(chan struct{})
	go func() { d.close(100 * time.Millisecond); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close(100ms) still waits for a stuck sink after 10s")
	}
}

// slowSink takes a millisecond per Write.
type slowSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *slowSink) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// A stderr that is slow but moving loses no line of a burst larger than
// the queue kept for a stuck one.
func TestDiagWriterKeepsABurstForASlowSink(t *testing.T) {
	sink := &slowSink{}
	d := newDiagWriter(sink)
	line := strings.Repeat("y", 99) + "\n"
	n := 2 * diagQueue / len(line)
	for i := 0; i < n; i++ {
		fmt.Fprint(d, line)
	}
	d.close(patience)
	sink.mu.Lock()
	out := sink.buf.String()
	sink.mu.Unlock()
	if kept := strings.Count(out, line); kept != n || strings.Contains(out, "dropped") {
		t.Fatalf("%d of %d lines written out: %q", kept, n, out[max(len(out)-200, 0):])
	}
}
