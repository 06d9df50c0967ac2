package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"
)

// diagWriter is the stderr of pglease's own messages. Its Write never
// blocks: it queues the message, and a goroutine of its own writes the
// queue out. A stderr that blocks (a full pipe nobody reads, a stalled log
// shipper, a terminal paused by Ctrl-S) or fails therefore never delays
// what pglease does after a write, such as signalling the command when the
// lease is lost. Once a write has been stuck for diagStuck, the queue
// holds at most diagQueue bytes; lines that do not fit are dropped,
// counted, and the count is reported once the sink takes writes again. A
// sink that is slow but moving gets every line of a burst (up to
// diagQueueMax bytes waiting). A failed write is not retried.
//
// On a terminal with tostop, a write from a background process group
// raises SIGTTOU, which pglease and its supervisor catch (so that it does
// not stop them); the kernel then retries the write, raising SIGTTOU
// again, forever. The goroutine that writes therefore runs on a thread of
// its own that blocks SIGTTOU where the system allows it (Linux), which
// lets the write through as it would for a process that ignores SIGTTOU;
// elsewhere it drops the lines while the process is in the terminal's
// background (see mutedTerminal).
type diagWriter struct {
	sink io.Writer
	wake chan struct{} // a message is queued; closed by close

	mu      sync.Mutex
	queue   [][]byte
	size    int           // bytes queued or being written
	dropped int           // lines dropped and not yet reported
	idle    chan struct{} // closed when the queue is next empty; nil when it is
	writing time.Time     // when the write in progress began; zero: none
	closed  bool
}

const (
	diagQueue    = 64 << 10               // the bytes of messages waiting for a stuck stderr
	diagQueueMax = 4 << 20                // for a slow one
	diagStuck    = 100 * time.Millisecond // a write this old is stuck
)

func newDiagWriter(sink io.Writer) *diagWriter {
	d := &diagWriter{sink: sink, wake: make(chan struct{}, 1)}
	go d.drain()
	return d
}

// Write queues p and returns at once.
func (d *diagWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	if d.closed { // after Main: nothing waits on it any more
		d.mu.Unlock()
		return d.sink.Write(p)
	}
	defer d.mu.Unlock()
	if n := d.size + len(p); n > diagQueue && (d.stuck() || n > diagQueueMax) {
		d.dropped += lines(p)
		return len(p), nil
	}
	d.queue = append(d.queue, bytes.Clone(p))
	d.size += len(p)
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	select {
	case d.wake <- struct{}{}:
	default: // the drainer is awake already
	}
	return len(p), nil
}

// drain writes the queue out, on a thread of its own.
func (d *diagWriter) drain() {
	diagThread()
	for range d.wake {
		for {
			d.mu.Lock()
			batch := d.queue
			d.queue = nil
			if len(batch) == 0 {
				if d.idle != nil {
					close(d.idle)
					d.idle = nil
				}
				d.mu.Unlock()
				break
			}
			d.mu.Unlock()
			for _, b := range batch {
				ok := d.write(b)
				d.mu.Lock()
				d.size -= len(b)
				if !ok {
					d.dropped += lines(b)
				}
				n := d.dropped
				d.mu.Unlock()
				// The count goes out after a line that did, never in a
				// loop of its own against a sink that fails.
				if ok && n > 0 && d.write(fmt.Appendf(nil, "pglease: %d line(s) of pglease's messages were dropped: its stderr was blocked or failing\n", n)) {
					d.mu.Lock()
					d.dropped -= n
					d.mu.Unlock()
				}
			}
		}
	}
}

// stuck reports whether the write in progress has taken diagStuck or
// longer. d.mu is held.
func (d *diagWriter) stuck() bool {
	return !d.writing.IsZero() && time.Since(d.writing) >= diagStuck
}

// write writes b to the sink once and reports whether all of it went out.
func (d *diagWriter) write(b []byte) bool {
	if f, ok := d.sink.(*os.File); ok && mutedTerminal(f) {
		return false
	}
	d.mu.Lock()
	d.writing = time.Now()
	d.mu.Unlock()
	n, err := d.sink.Write(b)
	d.mu.Lock()
	d.writing = time.Time{}
	d.mu.Unlock()
	return err == nil && n == len(b)
}

// close waits at most wait for the queue to be written out, then makes
// later writes go to the sink directly. The drainer ends once it is idle;
// one stuck on the sink stays so, but nothing waits for it.
func (d *diagWriter) close(wait time.Duration) {
	d.mu.Lock()
	idle := d.idle
	d.mu.Unlock()
	if idle != nil {
		t := time.NewTimer(wait)
		select {
		case <-idle:
		case <-t.C:
		}
		t.Stop()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.wake)
	}
}

// lines counts the lines of p: a message without a newline is one.
func lines(p []byte) int { return max(bytes.Count(p, []byte{'\n'}), 1) }

// surviveBrokenPipe makes a write to a stderr whose reader is gone fail
// with EPIPE, which diagWriter drops and counts, instead of killing
// pglease (or its supervisor) with SIGPIPE: a log reader that exits must
// not end the supervision of a running command. The signal is caught, not
// ignored, so that the commands pglease starts get its default action.
func surviveBrokenPipe() {
	if len(brokenPipe) > 0 {
		signal.Notify(make(chan os.Signal, 1), brokenPipe...)
	}
}
