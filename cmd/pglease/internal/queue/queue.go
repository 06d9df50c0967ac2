// Package queue maps lease rows to the queues of waiters that pglease ls
// and the console show beside them.
package queue

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/cmd/pglease/internal/human"
)

// Name is the name whose queue a lease row belongs to: its own, or, for
// the row of a semaphore's slot ("name#3"), its semaphore's. No lease name
// ends like a slot's, so the two never meet.
func Name(row string) string {
	if i := strings.LastIndexByte(row, '#'); i > 0 && i < len(row)-1 {
		if _, err := strconv.ParseUint(row[i+1:], 10, 32); err == nil {
			return row[:i]
		}
	}
	return row
}

// Of is the name whose queue the lease row in belongs to: the name the
// row belongs to (a semaphore slot's semaphore, the name a shared lease's
// row shares, whatever a later kind's row records), or, for a plain
// lease, its own (Name of it).
func Of(in pglease.Info) string {
	if in.Of != "" {
		return in.Of
	}
	return Name(in.Name)
}

// ByName groups waiters by the name they wait for, keeping their order
// (first in line first). The map is never nil.
func ByName(ws []admin.Waiter) map[string][]admin.Waiter {
	q := map[string][]admin.Waiter{}
	for _, w := range ws {
		q[w.Name] = append(q[w.Name], w)
	}
	return q
}

// Describe is a queue in one line, as pglease ls and the console show it:
// "?" when it could not be read (known is false), "-" when nobody waits;
// otherwise, first in line first, each waiter's owner (through show; "?"
// for a registration without one), how long it has waited (waited says)
// and, for a wait of a kind other than plain, its kind ("(shared)", see
// human.Kind), at most limit of them (0: all) and then how many more.
func Describe(q []admin.Waiter, known bool, limit int, show func(string) string, waited func(admin.Waiter) time.Duration) string {
	switch {
	case !known:
		return "?"
	case len(q) == 0:
		return "-"
	}
	var parts []string
	for i, w := range q {
		if limit > 0 && i == limit {
			parts = append(parts, fmt.Sprintf("+%d more", len(q)-limit))
			break
		}
		owner := "?"
		if w.Owner != "" {
			owner = show(w.Owner)
		}
		part := owner + " " + human.Duration(max(waited(w), 0))
		if k := human.Kind(w.Kind, 0, 0); k != "" {
			part += " (" + k + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}
