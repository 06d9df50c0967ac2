package pglease

// What a shutdown, or a call cut by its context, must not leave behind.
// An acquisition whose caller gave up goes on in the background until its
// statement answers, and gives back what it was granted (detached,
// attempt.go). A statement whose outcome nobody knows — its connection
// failed, or Close had to cut it — may have been granted a row: the row
// carries this client's id (Orphans in queries.sql), and is released by
// token by the client in the background (sweep), by the client's next
// attempt on the name (orphan), or by Close, which waits for the
// statements in flight rather than cut them, and then releases what is
// left (releaseOrphans).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// inflight is the client's acquisition statements in flight, and the
// names whose statement's outcome is unknown.
type inflight struct {
	ctx context.Context // bounds the statements; cut by Close past its bound
	cut context.CancelFunc
	wg  sync.WaitGroup

	mu      sync.Mutex
	closing bool // no statement starts
	// lost: what statements with an unknown outcome asked for, each with
	// the number of the last such statement (seq counts them).
	lost map[asked]uint64
	seq  uint64
}

// asked is what a statement asked for: the row name, or a shared lease of
// name (a row "name#i").
type asked struct {
	name   string
	shared bool
}

func (f *inflight) init() {
	f.ctx, f.cut = context.WithCancel(context.Background())
	f.lost = map[asked]uint64{}
}

// begin counts a statement in, unless Close has begun (false).
func (f *inflight) begin() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.wg.Add(1)
	return true
}

// end counts a statement out, once what it was granted was given back or
// handed out.
func (f *inflight) end() { f.wg.Done() }

// unknown records that a statement asking for names (shared leases of
// them, if shared) ended without an answer that says what it did: the
// server may have granted it rows.
func (f *inflight) unknown(names []string, shared bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	for _, n := range names {
		f.lost[asked{n, shared}] = f.seq
	}
}

// all returns what unknown recorded: row names, and names of shared
// leases.
func (f *inflight) all() (names, shared []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a := range f.lost {
		if a.shared {
			shared = append(shared, a.name)
		} else {
			names = append(names, a.name)
		}
	}
	slices.Sort(names)
	slices.Sort(shared)
	return names, shared
}

// mark returns the number of the last statement with an unknown outcome
// that asked for a, for swept.
func (f *inflight) mark(a asked) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost[a]
}

// swept forgets a, whose rows were released after mark returned seq,
// unless another statement with an unknown outcome asked for it since.
func (f *inflight) swept(a asked, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost[a] == seq {
		delete(f.lost, a)
	}
}

// drain stops new statements and waits for those in flight, at most
// bound; past it, it cuts them (and calls cut, which ends the client's
// background work) and waits for them to return.
func (f *inflight) drain(bound time.Duration, cut func()) {
	f.mu.Lock()
	f.closing = true
	f.mu.Unlock()
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		f.cut()
		cut()
		<-done
	}
	f.cut() // (releases the context)
}

// releaseOrphans releases, for Close, by token, the live rows of this
// client that statements whose outcome is unknown asked for. Close calls
// it once every lease the client handed out has been released and no
// statement is in flight, so that each such row is one an acquisition
// whose reply was lost was granted. It is bounded by releaseTimeout; its
// error names what may stay held until its TTL.
func (c *Client) releaseOrphans() error {
	names, shared := c.life.calls.all()
	if len(names)+len(shared) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var orphans []store.Orphan
	err := c.retry(ctx, func() (err error) {
		orphans, err = c.st.Orphans(ctx, c.db, c.id, names, shared)
		return err
	})
	if c.tableLost(ctx, err) {
		return nil // no table, no rows
	}
	if err != nil {
		return opError(fmt.Sprintf("release the rows acquisitions of %q whose replies were lost may have been granted (they expire after their TTL)",
			append(names, shared...)), err)
	}
	var errs []error
	for _, o := range orphans {
		if err := c.releaseOrphan(ctx, o); err != nil {
			errs = append(errs, opError(fmt.Sprintf("release %q, whose acquisition reply was lost (it expires after its TTL)", o.Name), err))
		}
	}
	return errors.Join(errs...)
}

// releaseOrphan releases a row of this client whose acquisition reply was
// lost, by token.
func (c *Client) releaseOrphan(ctx context.Context, o store.Orphan) error {
	c.cfg.Logger.WarnContext(ctx, "pglease: releasing a lease row whose acquisition reply was lost", "name", o.Name, "token", o.Token)
	return c.retry(ctx, func() error { return c.release(ctx, o.Name, o.Token) })
}

// sweepLater releases, in the background, the rows of this client that a
// statement with an unknown outcome asked for (names, or shared leases of
// them) and no lease of the client holds (see sweep).
func (c *Client) sweepLater(names []string, shared bool) {
	c.life.goBackground(func() {
		for _, name := range names {
			c.sweep(asked{name, shared})
		}
	})
}

// sweep releases by token the live rows of this client that a asked for
// and no lease of the client holds. It holds the local slot of a's name
// meanwhile, waiting for it at most the statement timeout: while it does,
// no acquisition of this client asks for the name, so such a row is one
// an acquisition whose reply was lost was granted (or one an abandoned
// statement was granted, which its undo releases too). A failure leaves
// the row to the next attempt on the name, to Close, or to its TTL.
func (c *Client) sweep(a asked) {
	if !a.shared && c.reg.lease(a.name) != nil {
		c.life.calls.swept(a, c.life.calls.mark(a)) // the one row of the name is the lease's
		return
	}
	slot := c.reg.getSlot(a.name)
	t := time.NewTimer(c.cfg.StatementTimeout)
	defer t.Stop()
	select {
	case <-slot.tok:
	case <-t.C:
		c.putSlot(a.name, slot, false) // the holder's next attempt finds the row
		return
	case <-c.life.bg.Done():
		c.putSlot(a.name, slot, false) // Close releases it
		return
	}
	defer c.putSlot(a.name, slot, true)
	seq := c.life.calls.mark(a)
	ctx, cancel := context.WithTimeout(c.life.bg, c.cfg.StatementTimeout)
	defer cancel()
	names, shared := []string{a.name}, []string(nil)
	if a.shared {
		names, shared = nil, names
	}
	var orphans []store.Orphan
	err := c.retry(ctx, func() (err error) {
		orphans, err = c.st.Orphans(ctx, c.db, c.id, names, shared)
		return err
	})
	if err != nil {
		return
	}
	for _, o := range orphans {
		if l := c.reg.lease(o.Name); l != nil && l.token == o.Token {
			continue // a shared lease of the client's
		}
		if err := c.releaseOrphan(ctx, o); err != nil {
			return
		}
	}
	c.life.calls.swept(a, seq)
}
