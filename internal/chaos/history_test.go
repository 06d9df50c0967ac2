package chaos

import (
	"strings"
	"testing"
	"time"
)

func belief(pid int, name string, tok int64, t int64) Event {
	return Event{K: KindBelief, Pid: pid, Name: name, Tok: tok, T: t}
}

func TestCheckerFindsEachViolation(t *testing.T) {
	ms := int64(time.Millisecond)
	clean := []Event{
		{K: KindAcquired, Pid: 1, Name: "a", Tok: 1, T: 0},
		belief(1, "a", 1, 1*ms), belief(1, "a", 1, 50*ms),
		{K: KindAcquired, Pid: 2, Name: "a", Tok: 2, T: 60 * ms},
		belief(2, "a", 2, 61*ms), belief(2, "a", 2, 90*ms),
		belief(1, "b", 7, 10*ms),
	}
	terminated := []Fault{{Kind: "terminate", Pid: 1, Start: 55 * ms, End: 56 * ms}}
	okWrites := []Write{{1, "a", 1, 1}, {2, "a", 2, 2}, {3, "a", 2, 2}}
	if rep := Check(clean, okWrites, nil, Options{}); !rep.OK() || rep.Sections != 3 || rep.Beliefs != 5 {
		t.Fatalf("clean history: %s", rep)
	}
	for _, tc := range []struct {
		name   string
		events []Event
		writes []Write
		faults []Fault
		opt    Options
		want   string
	}{
		{"overlap", append(clean[:len(clean):len(clean)], belief(1, "a", 1, 70*ms)), nil, nil, Options{}, "overlap"},
		{"token order", append(clean[:len(clean):len(clean)], belief(3, "a", 1, 100*ms)), nil, nil, Options{}, "token order"},
		{"duplicate", append(clean[:len(clean):len(clean)], belief(3, "a", 2, 100*ms)), nil, nil, Options{}, "duplicate token"},
		{"stale belief", append(clean[:len(clean):len(clean)], Event{K: KindStale, Pid: 1, Name: "a", Tok: 1, Gap: int64(time.Second)}), nil, nil, Options{}, "stale belief"},
		{"resume", append(clean[:len(clean):len(clean)], Event{K: KindResume, Pid: 1, Name: "a", Tok: 1}), nil, nil, Options{}, "resumed holder"},
		{"guard vs fence", append(clean[:len(clean):len(clean)], Event{K: KindWrite, Pid: 1, Name: "a", Tok: 1, Msg: "fence"}), nil, nil, Options{}, "guard passed"},
		{"stale write", clean, []Write{{1, "a", 2, 2}, {2, "a", 1, 1}}, nil, Options{}, "stale write accepted"},
		{"lease overlap", append(clean[:len(clean):len(clean)], Event{K: KindDone, Pid: 1, Name: "a", Tok: 1, T: 80 * ms, Dl: 200 * ms}), nil, nil, Options{}, "lease overlap"},
		{"overlap outside the window", append(clean[:len(clean):len(clean)], belief(1, "a", 1, 70*ms)), nil, terminated, Options{FastPids: map[int]bool{2: true}}, "overlap"},
		{"overlap of a plain holder", append(clean[:len(clean):len(clean)], belief(1, "a", 1, 70*ms)), nil, terminated, Options{}, "overlap"},
		{"overlap before the termination", append(clean[:len(clean):len(clean)], belief(1, "a", 1, 70*ms)), nil, []Fault{{Kind: "terminate", Pid: 1, Start: 65 * ms, End: 66 * ms}}, Options{FastPids: map[int]bool{1: true}}, "overlap"},
		{"liveness", clean, nil, []Fault{{Kind: "x", End: 95 * ms}}, Options{Names: []string{"a"}, Liveness: time.Second, End: int64(10 * time.Second)}, "liveness"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(tc.events, tc.writes, tc.faults, tc.opt)
			if rep.OK() || !strings.Contains(strings.Join(rep.Violations, "\n"), tc.want) {
				t.Fatalf("want a %q violation, got %s", tc.want, rep)
			}
		})
	}
	// Tolerated: an overlap (of beliefs and of the lease) in the documented
	// window, a late cancel within tolerance, a fault healed too close to
	// the end for liveness. The window is measured: Done 15 ms after the
	// successor acquired.
	events := append(clean[:len(clean):len(clean)], belief(1, "a", 1, 70*ms),
		Event{K: KindDone, Pid: 1, Name: "a", Tok: 1, T: 75 * ms, Dl: 900 * ms},
		Event{K: KindStale, Pid: 1, Name: "a", Tok: 1, Gap: int64(time.Millisecond)})
	rep := Check(events, nil, append(terminated, Fault{Kind: "x", End: 95 * ms}), Options{FastPids: map[int]bool{1: true},
		StaleTolerance: 10 * time.Millisecond, Names: []string{"a"}, Liveness: time.Second, End: 100 * ms})
	if !rep.OK() || rep.AllowedOverl != 1 || rep.LateCancels != 1 || len(rep.Windows) != 1 || rep.Windows[0] != 15*time.Millisecond {
		t.Fatalf("tolerated history: %s, windows %v", rep, rep.Windows)
	}
	// A proxy resetting the holder's connections ends its session from
	// outside too: the same window, for fast-failover holders only.
	reset := []Fault{{Kind: "reset", Pid: 1, Start: 55 * ms, End: 56 * ms}}
	if rep := Check(events[:len(events)-1], nil, reset, Options{FastPids: map[int]bool{1: true}}); !rep.OK() || rep.AllowedOverl != 1 || len(rep.Windows) != 1 {
		t.Fatalf("overlap in the window of a reset: %s, windows %v", rep, rep.Windows)
	}
	if rep := Check(events[:len(events)-1], nil, reset, Options{}); rep.OK() {
		t.Fatalf("overlap of a plain holder after a reset passed: %s", rep)
	}
	if rep := Check(events[:len(events)-1], nil, []Fault{{Kind: "partition", Pid: 1, Start: 55 * ms, End: 56 * ms}}, Options{FastPids: map[int]bool{1: true}}); rep.OK() {
		t.Fatalf("overlap after a partition passed: %s", rep)
	}
}

func TestRecorderSurvivesTornLines(t *testing.T) {
	dir := t.TempDir()
	r, err := NewRecorder(dir+"/h.log", "o")
	if err != nil {
		t.Fatal(err)
	}
	r.Record(belief(0, "a", 1, 5))
	r.Record(Event{K: KindAcquired, Name: "a", Tok: 1, T: 1})
	_, _ = r.f.WriteString(`{"k":"b","n":"a","to`) // a holder killed mid-line
	r.Close()
	ev, err := LoadDir(dir)
	if err != nil || len(ev) != 2 || ev[0].K != KindAcquired || ev[1].Owner != "o" {
		t.Fatalf("LoadDir = %+v, %v", ev, err)
	}
}
