package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// AcquireAllArgs are the inputs of one all-or-nothing acquisition.
type AcquireAllArgs struct {
	// Names are acquired together. The caller sorts them and removes
	// duplicates: the order is the order their locks are taken in.
	Names        []string
	Owner        string
	TTL, MinHold time.Duration
	Metadata     []byte // JSON object
	Client       string // the client's random id, added to the metadata
	// FairAfter: how long a queued waiter may be overtaken before a free
	// lease is promised to it (see CreateAcquire); a promised name is not free.
	FairAfter time.Duration
}

// NameResult is one name's part of an AcquireAllResult.
type NameResult struct {
	Name string
	// Token is the name's new fencing token when the set was acquired.
	Token int64
	// Free: the name could have been taken (no row, an expired one, or a
	// row of this client's own); false means held, or promised (Ahead).
	Free bool
	// The row as the statement saw it: the holder when the set was not
	// acquired, the row taken over when it was. OtherRemaining is negative
	// when there was no row.
	OtherOwner        string
	OtherToken        int64
	OtherRemaining    time.Duration
	OtherHeartbeatAge time.Duration
	OtherClient       string
	// Ahead is the number of live waiters of other clients to whom the name
	// is promised.
	Ahead int64
	// Clash is a live lease of another kind on the name (a semaphore of
	// that name; the zero Clash when none): a name is one kind of lease, so
	// the name is not free.
	Clash Clash
	// HolderInSession, HolderWatchable and HolderSession describe a
	// session-bound holder as AcquireResult's fields of the same names do.
	HolderInSession, HolderWatchable bool
	HolderSession                    int32
}

// AcquireAllResult is the outcome of one all-or-nothing attempt.
type AcquireAllResult struct {
	Acquired bool         // every name was written, or (false) none was
	Names    []NameResult // one per name, in the order of AcquireAllArgs.Names
}

// errPartial rolls back an AcquireAll transaction in which a row changed
// under the statement, so that only some names were written.
var errPartial = errors.New("not every name could be written")

// AcquireAll acquires every name of a.Names or none, in one transaction on
// db: it takes the names' transaction-scoped advisory locks in order
// (AcquireAllLocks), then checks that each is free and writes every row
// (AcquireAll). A transaction in which a row changed under the statement,
// so that some names could not be written, is rolled back and reported as
// not acquired, with those names not free.
func (s *Store) AcquireAll(ctx context.Context, db DB, a AcquireAllArgs) (AcquireAllResult, error) {
	ns, err := s.lockNS()
	if err != nil {
		return AcquireAllResult{}, err
	}
	names, err := json.Marshal(a.Names)
	if err != nil {
		return AcquireAllResult{}, err
	}
	meta := a.Metadata
	if len(meta) == 0 {
		meta = []byte("{}")
	}
	var res AcquireAllResult
	err = db.InTx(ctx, func(q Querier) error {
		if err := q.Query(ctx, s.Q.AcquireAllLocks, []any{string(names), ns}, func(Row) error { return nil }); err != nil {
			return err
		}
		res = AcquireAllResult{Names: make([]NameResult, 0, len(a.Names))}
		written := 0
		err := q.Query(ctx, s.Q.AcquireAll, []any{string(names), a.Owner, a.TTL.Milliseconds(), a.MinHold.Milliseconds(),
			string(meta), ns, a.Client, a.FairAfter.Milliseconds()}, func(r Row) error {
			var n NameResult
			var ok bool
			var remMS, hbMS int64
			if err := r.Scan(&n.Name, &ok, &n.Token, &n.OtherOwner, &n.OtherToken, &remMS, &hbMS, &n.OtherClient, &n.Free, &n.Ahead, &n.Clash.Kind, &n.Clash.Size,
				&n.HolderInSession, &n.HolderWatchable, &n.HolderSession); err != nil {
				return err
			}
			n.OtherRemaining = time.Duration(remMS) * time.Millisecond
			n.OtherHeartbeatAge = time.Duration(hbMS) * time.Millisecond
			if ok {
				written++
			}
			res.Names = append(res.Names, n)
			return nil
		})
		switch {
		case err != nil:
			return err
		case len(res.Names) != len(a.Names):
			return fmt.Errorf("acquire all: %d rows for %d names (a pglease bug)", len(res.Names), len(a.Names))
		case written == len(a.Names):
			res.Acquired = true
		case written > 0:
			// A row changed under the statement: undo the others.
			for i := range res.Names {
				if res.Names[i].Token == 0 {
					// Taken meanwhile: the holder is unknown.
					res.Names[i].Free, res.Names[i].OtherRemaining = false, -1
				}
				res.Names[i].Token = 0
			}
			return errPartial
		}
		return nil
	})
	if errors.Is(err, errPartial) {
		return res, nil
	}
	if err != nil {
		return AcquireAllResult{}, err
	}
	return res, nil
}
