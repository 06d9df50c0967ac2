package chaos

import (
	"slices"
	"testing"
	"time"
)

// The failover measurements on a hand-made history: name "a" is held by
// pid 1 through the fault (its lease ends by itself 3 s after the fault
// began), nobody holds it for 4 s, then pid 2 acquires it with a token
// lower than one handed out before the fault (as after an asynchronous
// failover). Name "b" is held across the fault: a write fails in it, then
// a renewal succeeds (a renewal before the fault does not count).
func TestMeasureFailovers(t *testing.T) {
	s := func(sec float64) int64 { return int64(sec * float64(time.Second)) }
	events := []Event{
		{K: KindAcquired, Name: "a", Tok: 5, Pid: 1, T: s(0)},
		{K: KindBelief, Name: "a", Tok: 5, Pid: 1, T: s(1)},
		{K: KindDone, Name: "a", Tok: 5, Pid: 1, T: s(13), Dl: s(13.5)},
		{K: KindReleased, Name: "a", Tok: 5, Pid: 1, T: s(14)},
		{K: KindAcquired, Name: "a", Tok: 4, Pid: 2, T: s(17)},
		{K: KindReleased, Name: "a", Tok: 4, Pid: 2, T: s(18)},
		{K: KindAcquired, Name: "a", Tok: 7, Pid: 1, T: s(18.5)},
		{K: KindReleased, Name: "a", Tok: 7, Pid: 1, T: s(40)},
		{K: KindAcquired, Name: "b", Tok: 6, Pid: 3, T: s(2)},
		{K: KindRenewed, Name: "b", Tok: 6, Pid: 3, T: s(9)},
		{K: KindWrite, Name: "b", Tok: 6, Pid: 3, T: s(11)},
		{K: KindRenewed, Name: "b", Tok: 6, Pid: 3, T: s(14)},
		{K: KindReleased, Name: "b", Tok: 6, Pid: 3, T: s(40)},
	}
	faults := []Fault{
		{Kind: "x", Start: s(10), End: s(15)},
		{Kind: "y", Start: s(50), End: s(51)},
	}
	m := measureFailovers(events, faults, "x", []string{"a", "b"}, time.Minute)
	if m.failovers != 1 {
		t.Errorf("failovers = %d, want 1", m.failovers)
	}
	// a: free from its lease's end (13 s) to the next acquisition (17 s);
	// the hand-off at 18 s, after the fault healed, does not count; b:
	// held throughout.
	if want := []time.Duration{4 * time.Second, 0}; len(m.unavailable) != 2 || m.unavailable[0] != want[0] || m.unavailable[1] != want[1] {
		t.Errorf("unavailable = %v, want %v", m.unavailable, want)
	}
	if len(m.noticed) != 1 || m.noticed[0] != 3*time.Second {
		t.Errorf("noticed = %v, want [3s]", m.noticed)
	}
	if m.kept != 1 {
		t.Errorf("kept = %d, want 1", m.kept)
	}
	if m.reissued != 1 {
		t.Errorf("reissued = %d, want 1", m.reissued)
	}
	// Fault y: a is free from 40 s on, through y (50–51 s), until the
	// measurement window ends (1 min after y healed).
	m = measureFailovers(events, faults, "y", []string{"a"}, time.Minute)
	if want := 61 * time.Second; len(m.unavailable) != 1 || m.unavailable[0] != want {
		t.Errorf("unavailable after y = %v, want [%v]", m.unavailable, want)
	}
}

// lostWrites counts acknowledged writes missing from the resource.
func TestLostWrites(t *testing.T) {
	events := []Event{
		{K: KindWrite, Name: "a", Tok: 1, Pid: 1, OK: true, T: 10},
		{K: KindWrite, Name: "a", Tok: 1, Pid: 1, OK: true, T: 30},
		{K: KindWrite, Name: "a", Tok: 2, Pid: 2, OK: true, T: 20},
		{K: KindWrite, Name: "a", Tok: 3, Pid: 2, T: 40},
	}
	ws := []Write{{Seq: 1, Name: "a", Token: 1, Pid: 1}}
	lost := lostWrites(events, ws)
	if want := []int64{20, 30}; !slices.Equal(lost, want) {
		t.Errorf("lostWrites = %v, want %v", lost, want)
	}
	faults := []Fault{{Kind: "x", Start: 5, End: 6}, {Kind: "y", Start: 15, End: 25}, {Kind: "x", Start: 35, End: 36}}
	if n := lostBefore(lost, faults, "x"); n != 1 {
		t.Errorf("lost by x = %d, want 1 (the write at 30)", n)
	}
	if n := lostBefore(lost, faults, "y"); n != 1 {
		t.Errorf("lost by y = %d, want 1 (the write at 20, during y)", n)
	}
}
