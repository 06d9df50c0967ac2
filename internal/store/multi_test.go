package store

import (
	"testing"
	"time"
)

// AcquireAll writes every row, each with its own token, or none: with one
// name held, nothing is written and the held name is reported.
func TestAcquireAllWritesEveryRowOrNone(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	args := func(client string, names ...string) AcquireAllArgs {
		return AcquireAllArgs{Names: names, Owner: "o-" + client, TTL: 10 * time.Second, Client: client, FairAfter: 100 * time.Millisecond}
	}
	held, err := s.Acquire(ctx, db, AcquireArgs{Name: "b", Owner: "holder", TTL: 10 * time.Second, Client: "h"})
	if err != nil || !held.Acquired {
		t.Fatalf("Acquire b: %+v, %v", held, err)
	}
	r, err := s.AcquireAll(ctx, db, args("c1", "a", "b", "c"))
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	if r.Acquired || len(r.Names) != 3 {
		t.Fatalf("AcquireAll with b held = %+v, want not acquired, 3 names", r)
	}
	for _, n := range r.Names {
		if want := n.Name != "b"; n.Free != want || n.Token != 0 {
			t.Errorf("%q: free %v token %d, want free %v, no token", n.Name, n.Free, n.Token, want)
		}
	}
	if b := r.Names[1]; b.OtherOwner != "holder" || b.OtherToken != held.Token || b.OtherRemaining <= 0 {
		t.Errorf("b's holder = %+v, want holder token %d", b, held.Token)
	}
	for _, name := range []string{"a", "c"} {
		if _, ok, err := s.Get(ctx, db, name); err != nil || ok {
			t.Fatalf("row %q after a refused AcquireAll: present %v, %v", name, ok, err)
		}
	}
	if _, err := s.Release(ctx, db, "b", held.Token); err != nil {
		t.Fatal(err)
	}
	r, err = s.AcquireAll(ctx, db, args("c1", "a", "b", "c"))
	if err != nil || !r.Acquired {
		t.Fatalf("AcquireAll of free names = %+v, %v", r, err)
	}
	seen := map[int64]bool{}
	for _, n := range r.Names {
		if n.Token <= held.Token || seen[n.Token] {
			t.Errorf("%q: token %d, want a token of its own above %d", n.Name, n.Token, held.Token)
		}
		seen[n.Token] = true
		rec, ok, err := s.Get(ctx, db, n.Name)
		if err != nil || !ok || rec.Token != n.Token || rec.Owner != "o-c1" {
			t.Errorf("row %q = %+v (present %v, %v), want token %d", n.Name, rec, ok, err, n.Token)
		}
	}
	// Another client is refused; the same client (a lost reply's rows) is not.
	if r2, err := s.AcquireAll(ctx, db, args("c2", "c", "d")); err != nil || r2.Acquired {
		t.Fatalf("AcquireAll by another client = %+v, %v, want refused", r2, err)
	}
	if r3, err := s.AcquireAll(ctx, db, args("c1", "c", "d")); err != nil || !r3.Acquired {
		t.Fatalf("AcquireAll over the client's own rows = %+v, %v, want acquired", r3, err)
	}
}
