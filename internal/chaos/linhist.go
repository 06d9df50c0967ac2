package chaos

import "github.com/pglease/pglease/internal/linhist"

// RegisterOps turns a holder history into operations on fenced registers,
// one per lease name, for the external linearizability checker (see
// internal/linhist): every acquisition, every fenced write (guarded, or a
// stale holder's plain fenced write) with its outcome; the writes carry no
// value (nothing reads the fence back). A holder does not
// record when its calls begin, so each call is given the time of the
// worker's previous event (its start, its previous release, error, belief
// or write), which came before it; a write's return is when the worker
// recorded it. A write that failed with an error (not a refusal) may have
// committed: its outcome is unknown. Releases are left out: no holder
// writes after releasing, so they would constrain nothing.
func RegisterOps(events []Event) []linhist.Op {
	type key struct {
		pid  int
		name string
	}
	start := map[int]int64{} // by pid
	prev := map[key]int64{}  // the worker's previous event
	since := func(k key) int64 { return max(prev[k], start[k.pid]) }
	var ops []linhist.Op
	for _, e := range events {
		k := key{e.Pid, e.Name}
		switch e.K {
		case KindStart:
			start[e.Pid] = e.T
			continue
		case KindAcquired:
			ops = append(ops, linhist.Op{Op: linhist.Acquire, Key: e.Name, Token: e.Tok, Client: e.Pid, Call: since(k), Return: e.T})
		case KindWrite, KindStaleW:
			op := linhist.Op{Op: linhist.Write, Key: e.Name, Token: e.Tok, Guarded: e.K == KindWrite, Client: e.Pid, Call: since(k), Return: e.T}
			switch {
			case e.OK:
				op.Outcome = linhist.OK
			case e.K == KindWrite && (e.Msg == "guard" || e.Msg == "fence"), e.K == KindStaleW && e.Msg == "":
				op.Outcome = linhist.Rejected // refused in the transaction, which rolled back
			default:
				op.Outcome = linhist.Unknown
			}
			ops = append(ops, op)
		case KindBelief, KindReleased, KindError, KindLost, KindStale, KindResume:
		default:
			continue // recorded by other goroutines (renewals, Done, contention)
		}
		if e.Name != "" {
			prev[k] = e.T
		}
	}
	return ops
}
