package pglease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// The kinds of lease where callers meet them: the words a *KindError names
// them by, the one translation of the store's code for a kind, and the
// rules of which options each call takes.

// A kind of lease plugs into the acquisition engine (engine.go, attempt.go)
// as a value of the kind interface, one type per file: kind_plain.go,
// kind_slot.go, kind_shared.go, kind_quota.go, kind_set.go. The engine asks its kind
// what to contend for, how to wait, which statement an attempt runs and
// how to read a refusal; it tests no option of the kind's. kindOf maps a
// call and its options to a kind, once per call.
//
// kind is an interface and not a struct of flags because the kinds differ
// in what they do (their statements and how a refusal is read), not only
// in data. The kinds' values are empty structs: what a kind needs of the
// call (a semaphore's slot count) it reads in the acquisition's options,
// so choosing a kind allocates nothing. oneName, embedded, gives the kinds
// of a single name (all but a set) what they share: one attempt per row,
// and refusedOne. A new kind is a file with its type, its statement and
// its refusal (usually oneName's), a case in kindOf, its words for a
// *KindError, and its option in the table below.

// kind is a kind of lease as the acquisition engine uses it.
type kind interface {
	// words names the kind, with the size it asks for in o, as a
	// *KindError does (a set's leases are plain ones).
	words(o *leaseOptions) leaseKind
	// rows returns the lease rows an acquisition of name contends for
	// (Plan.Names): name itself, or its slot names. A set's rows are its
	// names, given by its call.
	rows(name string, o *leaseOptions) []string
	// units returns what the attempts of one round ask for, one unit per
	// statement, from the rows.
	units(rows []string) [][]string
	// queue is how a wait of the kind uses the server's queue (the
	// waker's mode). A kind that queues (not unqueued) holds its name's
	// local slot for the whole acquisition, as the queue has one place
	// per client and name; the others take each unit's local slots for
	// each attempt, if no other goroutine of the client holds them.
	queue() queueMode
	// keepsLocalSlot: a lease of the kind keeps its row's local slot
	// until it ends, its row's only holder in the client. A kind whose
	// leases do not is one whose holders share a name, each with a row
	// "name#i" the server picks: its acquisition gives the name's local
	// slot back once acquired (other goroutines of the client share the
	// name too), its lease records the name it shares (Lease.of), and the
	// rows a lost reply may have granted are looked for among the name's
	// (see inflight.unknown).
	keepsLocalSlot() bool
	// statement returns the statement of an attempt on unit (see
	// acquisition.attempt): its session-bound variant for a fast-failover
	// lease, a queued one when the wait queues (queueArgs).
	statement(a *acquisition, unit []string) func(context.Context) reply
	// refused reads a refusal of unit into r: the holders, their
	// remaining time, the fast-failover sessions to watch, the place in
	// the queue.
	refused(a *acquisition, rep reply, r *roundResult)
	// localWait is how long a round may wait for name, whose local slot
	// another goroutine of this client holds.
	localWait(a *acquisition, name string) time.Duration
	// describe names unit in an error (`"job"`, `the set ["a" "b"]`);
	// logRetry logs that a round failed with err and is retried after in.
	describe(unit []string) string
	logRetry(ctx context.Context, a *acquisition, err error, in time.Duration)
}

// kindOf is the kind of lease that the call e with options o asks for.
// It is the only place where options become a kind.
func kindOf(e entry, o *leaseOptions) kind {
	switch {
	case e == entrySet:
		return kindSet{}
	case o.shared:
		return kindShared{}
	case o.quota > 0:
		return kindQuota{}
	case o.slots > 1:
		return kindSlot{}
	}
	return kindPlain{}
}

// oneName is what the kinds of a single name share, embedded in each:
// one attempt per row, in random order so that the contenders for a
// semaphore spread out, and a refusal read by refusedOne.
type oneName struct{}

func (oneName) rows(name string, _ *leaseOptions) []string { return []string{name} }

func (oneName) units(rows []string) [][]string {
	if len(rows) == 1 {
		return [][]string{rows}
	}
	units := make([][]string, len(rows))
	for i, j := range rand.Perm(len(rows)) {
		units[i] = rows[j : j+1]
	}
	return units
}

func (oneName) keepsLocalSlot() bool { return true }

func (oneName) refused(a *acquisition, rep reply, r *roundResult) { a.refusedOne(rep, r, true) }

// localWait: a lease of this client notifies when released, and a
// semaphore's slot handed back notifies (putSlot): look again at the
// fallback poll at the latest.
func (oneName) localWait(a *acquisition, _ string) time.Duration { return a.c.cfg.PollInterval }

func (oneName) describe(unit []string) string { return strconv.Quote(unit[0]) }

func (oneName) logRetry(ctx context.Context, a *acquisition, err error, in time.Duration) {
	a.c.cfg.Logger.WarnContext(ctx, "pglease: acquire failed; retrying", "name", a.name, "err", err, "in", in)
}

// heldRowsOf returns the rows of the leases this client holds that share
// name (see kind.keepsLocalSlot).
func (c *Client) heldRowsOf(name string) []string {
	var rows []string
	for _, l := range c.reg.leases() {
		if l.of == name {
			rows = append(rows, l.name)
		}
	}
	return rows
}

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

// kind is the kind of lease an acquisition with these options asks for, as
// a *KindError names it (a set's leases are plain ones).
func (o leaseOptions) kind() leaseKind {
	return kindOf(entryAcquire, &o).words(&o)
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
	case store.RowQuota:
		return quotaKind(c.Size)
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
	optQuota
	numOptionIDs
)

// optionNames are the options as refusals name them.
var optionNames = [numOptionIDs]string{
	optTTL: "WithTTL", optMinHold: "WithMinHold", optMaxHold: "WithMaxHold", optMetadata: "WithMetadata",
	optFastFailover: "WithFastFailover", optSlots: "WithSlots", optShared: "WithShared", optQuota: "WithQuota",
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
		optFastFailover: allowed, optSlots: allowed, optShared: allowed, optQuota: allowed,
	}},
	entrySet: {"", [numOptionIDs]string{
		optTTL: allowed, optMinHold: allowed, optMaxHold: allowed, optMetadata: allowed,
		optFastFailover: "is not supported for a set of leases: its leases are plain ones, freed by expiry when their holder dies",
		optSlots:        "does not apply to a set of leases (name the slots, or acquire the semaphore with Acquire)",
		optShared:       "does not apply to a set of leases: a set's leases are exclusive (acquire shared leases one by one with Acquire)",
		optQuota:        "does not apply to a set of leases: a set's leases are exclusive (acquire units of a quota with Acquire)",
	}},
	entryElector: {"NewElector: ", [numOptionIDs]string{
		optTTL: allowed, optMinHold: allowed, optMaxHold: allowed, optMetadata: allowed,
		optFastFailover: allowed,
		optSlots:        "does not apply: an election has one leader (use Acquire or Run with WithSlots for several holders at once)",
		optShared:       "does not apply: an election has one leader",
		optQuota:        "does not apply: an election has one leader",
	}},
}

// checkOptions checks that resolved options suit the call e: that they
// ask for one kind of lease, whatever the call, and then optionRules. It
// returns an *InvalidError of kind "argument" (for the first refused
// option in the order of the columns), or nil. The options' values and
// timing are checked before, as they are resolved (resolveOptions).
func checkOptions(e entry, o *leaseOptions) error {
	var kinds []string
	for _, k := range []struct {
		given bool
		name  string
	}{{o.shared, "WithShared"}, {o.slots > 1, fmt.Sprintf("WithSlots(%d)", o.slots)}, {o.quota > 0, fmt.Sprintf("WithQuota(%d, %d)", o.quota, o.weight)}} {
		if k.given {
			kinds = append(kinds, k.name)
		}
	}
	if len(kinds) > 1 {
		return invalid(kindArgument, "%s do not combine: a name is one kind of lease (a semaphore, shared/exclusive leases or a quota)", strings.Join(kinds, " and "))
	}
	rules := &optionRules[e]
	for id, why := range rules.cells {
		if why == allowed || !o.used[id] {
			continue
		}
		name := optionNames[id]
		switch optionID(id) {
		case optSlots:
			name = fmt.Sprintf("%s(%d)", name, o.slots)
		case optQuota:
			name = fmt.Sprintf("%s(%d, %d)", name, o.quota, o.weight)
		}
		return invalid(kindArgument, "%s%s %s", rules.prefix, name, why)
	}
	return nil
}
