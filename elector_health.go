package pglease

import (
	"context"
	"io"
	"net/http"
	"time"
)

// Leader health, for a liveness probe.
//
// A term of an [Elector] lasts from its election until its lead function
// returns. The term's lease ends by itself when renewals stop succeeding
// (at [Lease.Deadline], the local safety deadline, which only a successful
// renewal moves), and its context is cancelled then, or earlier on
// [Elector.Resign], a takeover or the end of Run's context. So failing
// renewals alone need no restart: the elector stops leading and campaigns
// again, and a restarted process would not reach the database any better.
// What pglease cannot end by itself is a lead function that does not
// return once its context is cancelled (stuck in a call that ignores its
// context, or deadlocked): the process then believes it leads while
// another instance may already lead, and after a Resign it even keeps the
// lease renewed, so nobody else can. That is what the probe reports, as
// client-go's HealthzAdaptor reports a leader whose lease expired more than
// a tolerance ago.
//
// Precisely: the elector is unhealthy when a term is in progress and now
// is past its end plus the tolerance, where its end is the earlier of the
// lease's local deadline and the moment the term's context was cancelled.
// The deadline is compared with the clock, not the lease's state, so a
// process whose deadline timer did not run (a wedged runtime) is unhealthy
// too.

// electorHealth is when the current term ended; guarded by the elector's
// mu.
type electorHealth struct {
	term  *Lease    // the term whose end is recorded
	ended time.Time // when term's context was cancelled
	cause error     // its cause
}

// termEnded records that the context of l's term ended; it runs on a
// goroutine of its own (context.AfterFunc), possibly after the term.
func (e *Elector) termEnded(l *Lease, tctx context.Context) {
	now := time.Now()
	cause := context.Cause(tctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == l && e.health.term != l {
		e.health.term, e.health.ended, e.health.cause = l, now, cause
	}
}

// Check reports whether the elector is healthy, for a liveness probe; its
// signature is that of a Kubernetes healthz checker (client-go's
// HealthzAdaptor), and the request is not used. It returns nil unless this
// instance believes it leads (its lead function has not returned) while
// its term ended longer ago than the tolerance ([ElectorConfig.HealthTolerance]):
// its lease's local deadline passed without a successful renewal, or its
// context was cancelled (lease lost, [Elector.Resign], Run's context), and
// lead has not returned since. The error then says how long ago the term
// ended and wraps its cause (an error matching [ErrLeaseLost], for
// instance). Failing renewals alone leave the elector healthy: the term
// ends at the deadline, lead returns, and the elector campaigns again.
func (e *Elector) Check(*http.Request) error {
	return e.check(time.Now())
}

func (e *Elector) check(now time.Time) error {
	e.mu.Lock()
	l, h := e.term, e.health
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	tolerance := e.cfg.HealthTolerance // NewElector filled in the default
	end, cause := l.Deadline(), error(&lostError{why: "no renewal succeeded before the local safety deadline"})
	if h.term == l && h.ended.Before(end) {
		end, cause = h.ended, h.cause
	}
	if late := now.Sub(end); late > tolerance {
		return errorf("elector %q: the lead function of the term with token %d has not returned %s after the term ended (tolerance %s): %w",
			e.name, l.Token(), late.Round(time.Millisecond), tolerance, cause)
	}
	return nil
}

// ServeHTTP serves [Elector.Check] as a liveness probe: status 200 and
// "ok" when healthy, else 503 and the reason. Register it where the
// probe looks, such as "/healthz".
func (e *Elector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if err := e.Check(r); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = io.WriteString(w, "ok")
}
