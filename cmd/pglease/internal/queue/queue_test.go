package queue

import (
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

func TestName(t *testing.T) {
	for row, want := range map[string]string{
		"job": "job", "job#0": "job", "job#12": "job", "a#b": "a#b", "job#": "job#",
		"#3": "#3", "x#1#2": "x#1", "job#-1": "job#-1", "job#99999999999": "job#99999999999",
	} {
		if got := Name(row); got != want {
			t.Errorf("Name(%q) = %q, want %q", row, got, want)
		}
	}
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		in   pglease.Info
		want string
	}{
		{pglease.Info{Name: "job", Kind: "plain"}, "job"},
		{pglease.Info{Name: "pool#2", Kind: "semaphore", Of: "pool", Size: 3, Weight: 1}, "pool"},
		{pglease.Info{Name: "cfg#0", Kind: "shared", Of: "cfg", Weight: 1}, "cfg"},
		{pglease.Info{Name: "q#0", Kind: "later", Of: "q", Size: 10, Weight: 3}, "q"},
		{pglease.Info{Name: "old#1"}, "old"}, // a row read without Of
	} {
		if got := Of(tc.in); got != tc.want {
			t.Errorf("Of(%+v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	ws := []admin.Waiter{
		{Owner: "a", Waited: 1500 * time.Millisecond, Kind: "plain"},
		{Owner: "", Waited: 20 * time.Millisecond, Kind: "shared"},
		{Owner: "c", Waited: -time.Second, Kind: "later"},
		{Owner: "d"},
	}
	same := func(s string) string { return s }
	waited := func(w admin.Waiter) time.Duration { return w.Waited }
	for _, tc := range []struct {
		q     []admin.Waiter
		known bool
		limit int
		want  string
	}{
		{ws, false, 0, "?"},
		{nil, true, 0, "-"},
		{ws, true, 0, "a 1.5s, ? 20ms (shared), c 0ms (later), d 0ms"},
		{ws, true, 3, "a 1.5s, ? 20ms (shared), c 0ms (later), +1 more"},
	} {
		if got := Describe(tc.q, tc.known, tc.limit, same, waited); got != tc.want {
			t.Errorf("Describe(limit %d, known %v) = %q, want %q", tc.limit, tc.known, got, tc.want)
		}
	}
}
