package pglease

import (
	"testing"
	"time"
)

// Info names each row's kind as the table records it, with the name the
// row belongs to, its kind's size and the row's weight; a row of a kind
// this version does not know (one a later version may add) is read as it
// is, with no change here. A shared lease's wait is named after the kind of
// the rows that share the name, the same way.
func TestInfoAndWaitersNameEveryKind(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "kinds"})
	ttl := WithTTL(time.Minute)
	plain, err := c.TryAcquire(ctx, "p", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(ctx)
	slot, err := c.TryAcquire(ctx, "pool", WithSlots(3), ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release(ctx)
	shared, err := c.TryAcquire(ctx, "cfg", WithShared(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Release(ctx)
	leases := rows(t, c)
	leases.InsertOfKind("q#0", "later-holder", 1<<40, time.Minute, "later", "q", 10, 3)

	type kindOf struct {
		Kind, Of     string
		Size, Weight int
	}
	want := map[string]kindOf{
		"p":           {"plain", "", 0, 1},
		slot.Name():   {"semaphore", "pool", 3, 1},
		shared.Name(): {"shared", "cfg", 0, 1},
		"q#0":         {"later", "q", 10, 3},
	}
	for name, w := range want {
		in, err := c.Get(ctx, name)
		if err != nil {
			t.Fatalf("Get(%q): %v", name, err)
		}
		if got := (kindOf{in.Kind, in.Of, in.Size, in.Weight}); got != w {
			t.Errorf("Get(%q): kind %+v, want %+v", name, got, w)
		}
	}
	infos, err := c.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != len(want) {
		t.Fatalf("List: %d rows, want %d: %+v", len(infos), len(want), infos)
	}
	for _, in := range infos {
		if got := (kindOf{in.Kind, in.Of, in.Size, in.Weight}); got != want[in.Name] {
			t.Errorf("List: %s kind %+v, want %+v", in.Name, got, want[in.Name])
		}
	}
	if in, _ := c.Get(ctx, "q#0"); in.Owner != "later-holder" || in.Token != 1<<40 || in.Remaining <= 0 {
		t.Errorf("the later kind's row: %+v", in)
	}

	// Shared waits: named after the live rows that share the name, or
	// "shared" when none does.
	leases.QueueShared("q", "q-reader")
	leases.QueueShared("cfg", "cfg-reader")
	leases.QueueShared("free", "free-reader")
	ws, err := c.waiters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, w := range ws {
		got[w.Name+" "+w.Owner] = w.Kind
	}
	if w := map[string]string{"q q-reader": "later", "cfg cfg-reader": "shared", "free free-reader": "shared"}; len(got) != len(w) ||
		got["q q-reader"] != w["q q-reader"] || got["cfg cfg-reader"] != w["cfg cfg-reader"] || got["free free-reader"] != w["free free-reader"] {
		t.Errorf("Waiters: kinds %v, want %v", got, w)
	}
}
