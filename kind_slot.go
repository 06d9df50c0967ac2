package pglease

// The slots of a semaphore (WithSlots(n), n > 1): n rows "name#0" …
// "name#n-1", each a lease of its own. An acquisition tries each slot in
// turn with the plain lease's statement, the semaphore's name and slot
// count recorded in the row; it does not queue, and takes a slot's local
// slot for one attempt only, if no other goroutine of the client holds it.

import (
	"context"
	"strconv"
)

// kindSlot is a slot of a semaphore.
type kindSlot struct{ oneName }

func (kindSlot) words(o *leaseOptions) leaseKind { return semaphoreKind(o.slots) }

// rows returns the slot names of the semaphore name.
func (kindSlot) rows(name string, o *leaseOptions) []string {
	names := make([]string, o.slots)
	for i := range names {
		names[i] = slotName(name, i)
	}
	return names
}

func (kindSlot) queue() queueMode { return unqueued }

func (kindSlot) statement(a *acquisition, unit []string) func(context.Context) reply {
	return a.rowStatement(unit[0], a.name)
}

// slotName is the lease name of slot i of the semaphore name (see
// [WithSlots]): "name#i". Each slot is a lease of its own, with its own
// fencing token, that [Client.Get] reads by this name. No lease name
// can end like a slot name (checkName), so the two never meet.
func slotName(name string, i int) string { return name + "#" + strconv.Itoa(i) }

// checkSlotNames refuses a semaphore's name (with WithSlots) whose slot
// names would be longer than a lease name may be.
func (o leaseOptions) checkSlotNames(name string) error {
	if o.slots <= 1 {
		return nil
	}
	if last := slotName(name, o.slots-1); len(last) > maxNameBytes {
		return invalid(kindName, "name is %d bytes, and with %d slots it gets the suffixes \"#0\" to \"#%d\": its slot names are up to %d bytes, the maximum is %d; shorten the name",
			len(name), o.slots, o.slots-1, len(last), maxNameBytes)
	}
	return nil
}
