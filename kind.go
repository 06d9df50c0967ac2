package pglease

import (
	"fmt"

	"github.com/pglease/pglease/internal/store"
)

// The kinds of lease where callers meet them: the words a *KindError names
// them by, the one translation of the store's code for a kind, and the
// rules of which options each call takes.

// leaseKind is a kind of lease as a *KindError names it: a word and, for a
// kind with a size, its size and what the size counts ("semaphore of 3
// slots"; a quota would be "quota of 10 units").
type leaseKind struct {
	word string
	size int    // 0: a kind without a size
	unit string // what size counts
}

var (
	plainKind  = leaseKind{word: "plain lease"}
	sharedKind = leaseKind{word: "shared lease"}
)

func semaphoreKind(slots int) leaseKind {
	return leaseKind{word: "semaphore", size: slots, unit: "slots"}
}

// String is the kind as KindError.Want and Have give it.
func (k leaseKind) String() string {
	if k.size == 0 {
		return k.word
	}
	return fmt.Sprintf("%s of %d %s", k.word, k.size, k.unit)
}

// kind is the kind of lease an acquisition with these options asks for (a
// set's leases are plain ones).
func (o leaseOptions) kind() leaseKind {
	switch {
	case o.shared:
		return sharedKind
	case o.slots > 1:
		return semaphoreKind(o.slots)
	}
	return plainKind
}

// clashKind is the kind of the live leases that refused an acquisition,
// as the store names it (AcquireResult.Clash, a set's NameResult.Clash;
// the zero Clash, none, never reaches here). It is the only Go code that
// reads the table's words for the kinds. A kind this version does not know
// (a later version's) is named by the table's word for it.
func clashKind(c store.Clash) leaseKind {
	switch c.Kind {
	case store.RowPlain:
		return plainKind
	case store.RowShared:
		return sharedKind
	case store.RowSemaphore:
		return semaphoreKind(c.Size)
	}
	k := leaseKind{word: c.Kind}
	if c.Size != 0 {
		k.size, k.unit = c.Size, "units"
	}
	return k
}

// entry is a row of the option rules: the calls that take options.
type entry int

const (
	entryAcquire entry = iota // Acquire, TryAcquire, Run, TryRun (and Config.Validate, Config.Plan)
	entrySet                  // AcquireAll, TryAcquireAll
	entryElector              // NewElector, for ElectorConfig.LeaseOptions
	numEntries
)

// optionID is a column of the option rules: an option, as leaseOptions.used
// records that it was given.
type optionID int

const (
	optTTL optionID = iota
	optMinHold
	optMaxHold
	optMetadata
	optFastFailover
	optSlots // WithSlots(n), n > 1 (WithSlots(1) is a plain lease)
	optShared
	numOptionIDs
)

// optionNames are the options as refusals name them.
var optionNames = [numOptionIDs]string{
	optTTL: "WithTTL", optMinHold: "WithMinHold", optMaxHold: "WithMaxHold", optMetadata: "WithMetadata",
	optFastFailover: "WithFastFailover", optSlots: "WithSlots", optShared: "WithShared",
}

// allowed is a cell of the option rules whose call takes the option.
const allowed = ""

// optionRules says, for each call, which options it takes: a cell is
// allowed, or why the call refuses the option, as the *InvalidError says
// it after the call's prefix and the option's name. checkOptions applies
// them.
var optionRules = [numEntries]struct {
	prefix string // how a refusal names the call
	cells  [numOptionIDs]string
}{
	entryAcquire: {"", [numOptionIDs]string{
		optTTL: allowed, optMinHold: allowed, optMaxHold: allowed, optMetadata: allowed,
		optFastFailover: allowed, optSlots: allowed, optShared: allowed,
	}},
	entrySet: {"", [numOptionIDs]string{
		optTTL: allowed, optMinHold: allowed, optMaxHold: allowed, optMetadata: allowed,
		optFastFailover: "is not supported for a set of leases: its leases are plain ones, freed by expiry when their holder dies",
		optSlots:        "does not apply to a set of leases (name the slots, or acquire the semaphore with Acquire)",
		optShared:       "does not apply to a set of leases: a set's leases are exclusive (acquire shared leases one by one with Acquire)",
	}},
	entryElector: {"NewElector: ", [numOptionIDs]string{
		optTTL: allowed, optMinHold: allowed, optMaxHold: allowed, optMetadata: allowed,
		optFastFailover: allowed,
		optSlots:        "does not apply: an election has one leader (use Acquire or Run with WithSlots for several holders at once)",
		optShared:       "does not apply: an election has one leader",
	}},
}

// checkOptions checks that resolved options suit the call e: that they
// ask for one kind of lease, whatever the call, and then optionRules. It
// returns an *InvalidError of kind "argument" (for the first refused
// option in the order of the columns), or nil. The options' values and
// timing are checked before, as they are resolved (resolveOptions).
func checkOptions(e entry, o *leaseOptions) error {
	if o.shared && o.slots > 1 {
		return invalid(kindArgument, "WithShared and WithSlots(%d) do not combine: a name is either a semaphore or shared/exclusive leases", o.slots)
	}
	rules := &optionRules[e]
	for id, why := range rules.cells {
		if why == allowed || !o.used[id] {
			continue
		}
		name := optionNames[id]
		if optionID(id) == optSlots {
			name = fmt.Sprintf("%s(%d)", name, o.slots)
		}
		return invalid(kindArgument, "%s%s %s", rules.prefix, name, why)
	}
	return nil
}
