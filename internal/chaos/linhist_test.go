package chaos

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pglease/pglease/internal/linhist"
)

// saveHistory writes the run's history for the external linearizability
// checker when PGLEASE_HISTORY_DIR is set.
func (r *run) saveHistory() {
	dir := linhist.Dir()
	if dir == "" {
		return
	}
	events, err := LoadDir(r.dir)
	if err == nil {
		_, err = linhist.Save(dir, "chaos-"+strings.TrimPrefix(r.t.Name(), "Test"), RegisterOps(events))
	}
	if err != nil {
		r.t.Errorf("writing the history: %v", err)
	}
}

// Each call begins at the worker's previous event: an acquisition after
// the start or the previous release, a write after its belief, a stale
// write after its loss; outcomes follow what the holder saw.
func TestRegisterOpsOfAHolderHistory(t *testing.T) {
	events := []Event{
		{K: KindStart, Pid: 1, T: 1},
		{K: KindWaiting, Pid: 1, Name: "a", T: 2}, // another goroutine: not a bound
		{K: KindAcquired, Pid: 1, Name: "a", Tok: 5, T: 3},
		{K: KindBelief, Pid: 1, Name: "a", Tok: 5, T: 4},
		{K: KindWrite, Pid: 1, Name: "a", Tok: 5, T: 5, OK: true},
		{K: KindRenewed, Pid: 1, Name: "a", Tok: 5, T: 6},
		{K: KindBelief, Pid: 1, Name: "a", Tok: 5, T: 7},
		{K: KindWrite, Pid: 1, Name: "a", Tok: 5, T: 8, Msg: "err: timeout"},
		{K: KindBelief, Pid: 1, Name: "a", Tok: 5, T: 9},
		{K: KindWrite, Pid: 1, Name: "a", Tok: 5, T: 10, Msg: "guard"},
		{K: KindLost, Pid: 1, Name: "a", Tok: 5, T: 11},
		{K: KindStaleW, Pid: 1, Name: "a", Tok: 5, T: 12},
		{K: KindReleased, Pid: 1, Name: "a", Tok: 5, T: 13},
		{K: KindDone, Pid: 1, Name: "a", Tok: 5, T: 14},
		{K: KindAcquired, Pid: 1, Name: "a", Tok: 9, T: 15},
	}
	var got []string
	for _, op := range RegisterOps(events) {
		got = append(got, fmt.Sprintf("%s %d %v %s %d..%d", op.Op, op.Token, op.Guarded, op.Outcome, op.Call, op.Return))
	}
	want := []string{
		"acquire 5 false  1..3",
		"write 5 true ok 4..5",
		"write 5 true unknown 7..8",
		"write 5 true rejected 9..10",
		"write 5 false rejected 11..12",
		"acquire 9 false  13..15",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
