package lincheck

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"
)

// register is the state of one lease row's fenced register.
type register struct {
	tok   int64 // the greatest token acquired
	held  bool  // tok's holder has not released it
	fence int64 // the greatest token of an accepted write
	val   int64 // the last accepted value
}

// step returns the states a register can be in after op (none: op is
// illegal in state r).
func step(r register, op Op) []register {
	switch op.Op {
	case Acquire:
		if op.Token <= r.tok {
			return nil
		}
		return []register{{tok: op.Token, held: true, fence: r.fence, val: r.val}}
	case Release:
		if r.tok == op.Token {
			r.held = false
		}
		return []register{r}
	case Read:
		if op.Value != r.val {
			return nil
		}
		return []register{r}
	}
	// A write.
	legal := op.Token >= r.fence
	if op.Guarded {
		legal = legal && r.held && op.Token == r.tok
	}
	applied := r
	applied.fence, applied.val = op.Token, op.Value
	switch {
	case op.Outcome == Rejected:
		return []register{r}
	case !legal && op.Outcome == OK:
		return nil
	case !legal:
		return []register{r} // unknown: it was not accepted
	case op.Outcome == OK:
		return []register{applied}
	}
	return []register{r, applied} // unknown: either
}

// Model is the porcupine model of a history: one fenced register per key
// (see the package documentation). Its operations' Input is an [Op].
var Model = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range history {
			k := o.Input.(Op).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{register{}} },
	Step: func(state, input, _ any) []any {
		var out []any
		for _, r := range step(state.(register), input.(Op)) {
			out = append(out, r)
		}
		return out
	},
	DescribeOperation: func(input, _ any) string { return describe(input.(Op)) },
	DescribeState: func(state any) string {
		r := state.(register)
		return fmt.Sprintf("token %d held %v, fence %d, value %d", r.tok, r.held, r.fence, r.val)
	},
}).ToModel()

// describe says what an operation did, for reports.
func describe(op Op) string {
	switch op.Op {
	case Acquire, Release:
		return fmt.Sprintf("%s %s token %d", op.Op, op.Key, op.Token)
	case Read:
		return fmt.Sprintf("read %s = %d", op.Key, op.Value)
	}
	g := "unguarded"
	if op.Guarded {
		g = "guarded"
	}
	return fmt.Sprintf("%s write %s token %d value %d: %s", g, op.Key, op.Token, op.Value, op.Outcome)
}
