package pglease

import "sync"

// registry is the part of a Client that owns what the client holds: the
// leases handed out (register, forget), the local slots that make each
// name a mutex between the client's goroutines (localmutex.go), and the
// count of held leases whose holders hear step-down requests. Its fields,
// and each held lease's hearStepDown, are guarded by mu.
type registry struct {
	mu      sync.Mutex
	held    map[string]*Lease     // the leases handed out
	locals  map[string]*localSlot // localmutex.go
	hearing int                   // the held leases whose holders hear step-down requests
}

func (r *registry) init() {
	r.held = map[string]*Lease{}
	r.locals = map[string]*localSlot{}
}

// forget drops l, which has ended, from the leases the client holds.
func (r *registry) forget(l *Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held[l.name] == l {
		delete(r.held, l.name)
		if l.hearStepDown {
			r.hearing--
		}
	}
}

// lease returns the client's lease of name, or nil.
func (r *registry) lease(name string) *Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[name]
}

// leases returns the leases the client holds.
func (r *registry) leases() []*Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Lease, 0, len(r.held))
	for _, l := range r.held {
		out = append(out, l)
	}
	return out
}

// hearsStepDowns reports whether the client holds a lease whose holder
// asked to hear step-down requests (Lease.StepDownRequested).
func (r *registry) hearsStepDowns() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hearing > 0
}

// hearStepDowns counts l, if the client holds it, among the leases whose
// holders hear step-down requests, and reports whether it was not yet.
func (r *registry) hearStepDowns(l *Lease) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.hearStepDown || r.held[l.name] != l {
		return false
	}
	l.hearStepDown = true
	r.hearing++
	return true
}
