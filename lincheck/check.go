package lincheck

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is the outcome of checking one history.
type Result struct {
	Ops, Keys int
	// Verdict is porcupine.Ok, porcupine.Illegal, or porcupine.Unknown
	// when the check ran out of time.
	Verdict porcupine.CheckResult
	// Problems describes each key whose operations are not linearizable.
	Problems []string
	info     porcupine.LinearizationInfo
	model    porcupine.Model
}

// Check checks a history against [Model], giving up after timeout (0: no
// limit).
func Check(ops []Op, timeout time.Duration) Result {
	hist := operations(ops)
	keys := map[string]bool{}
	for _, op := range ops {
		keys[op.Key] = true
	}
	r := Result{Ops: len(ops), Keys: len(keys), model: Model}
	r.Verdict, r.info = porcupine.CheckOperationsVerbose(Model, hist, timeout)
	if r.Verdict != porcupine.Illegal {
		return r
	}
	// Say which keys, and where their linearization stops.
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	single := Model
	single.Partition, single.PartitionEvent = nil, nil
	first := hist[0].Call
	for _, o := range hist {
		first = min(first, o.Call)
	}
	for _, k := range names {
		var part []porcupine.Operation
		for _, o := range hist {
			if o.Input.(Op).Key == k {
				part = append(part, o)
			}
		}
		res, info := porcupine.CheckOperationsVerbose(single, part, timeout)
		if res == porcupine.Illegal {
			r.Problems = append(r.Problems, explain(k, part, info, first))
		}
	}
	return r
}

// operations turns a history into porcupine's operations: an operation
// that never returned is open until after the last moment of the history.
func operations(ops []Op) []porcupine.Operation {
	var end int64
	clients := map[int]int{}
	for _, op := range ops {
		end = max(end, op.Call, op.Return)
		if _, ok := clients[op.Client]; !ok {
			clients[op.Client] = len(clients)
		}
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := op.Return
		if ret == 0 {
			ret = end + 1
		}
		hist = append(hist, porcupine.Operation{ClientId: clients[op.Client], Input: op, Call: op.Call, Return: ret})
	}
	return hist
}

// explain describes where the longest linearization of one key's
// operations stops, and what could not follow it.
func explain(key string, part []porcupine.Operation, info porcupine.LinearizationInfo, first int64) string {
	at := func(o porcupine.Operation) string {
		op := o.Input.(Op)
		ret := "never returned"
		if op.Return != 0 {
			ret = fmt.Sprintf("+%.6fs", time.Duration(op.Return-first).Seconds())
		}
		return fmt.Sprintf("%s (client %d, +%.6fs .. %s)", describe(op), op.Client, time.Duration(op.Call-first).Seconds(), ret)
	}
	var longest []porcupine.Operation
	for _, p := range info.PartialLinearizationsOperations() {
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "key %q: %d operations are not linearizable; the longest linearizable order has %d", key, len(part), len(longest))
	if n := len(longest); n > 0 {
		b.WriteString(", ending with:")
		for _, o := range longest[max(0, n-3):] {
			b.WriteString("\n    " + at(o))
		}
	}
	in := map[porcupine.Operation]bool{}
	for _, o := range longest {
		in[o] = true
	}
	var rest []porcupine.Operation
	for _, o := range part {
		if !in[o] {
			rest = append(rest, o)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	if len(rest) > 0 {
		b.WriteString("\n  and none of the operations left can follow, the first of them:")
		for _, o := range rest[:min(3, len(rest))] {
			b.WriteString("\n    " + at(o))
		}
	}
	return b.String()
}

// Visualize writes porcupine's interactive view of the checked history
// (with the longest linearizations found) to path, an HTML file.
func (r Result) Visualize(path string) error {
	return porcupine.VisualizePath(r.model, r.info, path)
}
