// Package queue maps lease rows to the queues of waiters that pglease ls
// and the console show beside them.
package queue

import (
	"strconv"
	"strings"

	"github.com/pglease/pglease"
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

// ByName groups waiters by the name they wait for, keeping their order
// (first in line first). The map is never nil.
func ByName(ws []pglease.Waiter) map[string][]pglease.Waiter {
	q := map[string][]pglease.Waiter{}
	for _, w := range ws {
		q[w.Name] = append(q[w.Name], w)
	}
	return q
}
