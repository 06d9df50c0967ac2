package pglease

import (
	"errors"
	"fmt"
	"os"
)

// SessionFile returns a duplicate of the file descriptor of the database
// connection that a fast-failover lease ([WithFastFailover]) is bound to.
//
// The server ends a session, and a waiter takes its leases over, only
// once every copy of the connection's descriptor is closed. Give the copy
// to a helper process that must outlive this one until the work the lease
// protects has stopped: pglease run gives it to the supervisor that kills
// the command's process group when pglease dies, so the waiter cannot
// start before that group is gone. While this process lives, nothing
// changes: the session ends when its client closes it or loses it, as
// before.
//
// Never read from or write to the returned file; close it when done. It
// fails with an error matching [ErrSessionUnavailable] when the lease was
// not acquired with fast failover, has ended, or its connection has been replaced, and
// with another error where the connection has no descriptor to share (a
// database/sql client of another driver, a platform without them).
func (l *Lease) SessionFile() (*os.File, error) {
	if !l.session {
		return nil, fmt.Errorf("%w: lease %q was not acquired with fast failover (acquire it WithFastFailover)", ErrSessionUnavailable, l.name)
	}
	if err := l.err(); err != nil {
		return nil, fmt.Errorf("%w: lease %q has ended: %w", ErrSessionUnavailable, l.name, err)
	}
	s, err := l.c.session()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != l.epoch || s.epoch == 0 {
		return nil, fmt.Errorf("%w: the connection lease %q was bound to is gone", ErrSessionUnavailable, l.name)
	}
	if s.sock == nil {
		return nil, errors.New("pglease: this client's dedicated connection has no file descriptor to share (a database/sql driver other than pgx)")
	}
	return dupConn(s.sock)
}
