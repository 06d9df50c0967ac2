package admin

import (
	"context"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/adminhook"
)

// ops are the root package's operations (see package adminhook).
var ops = adminhook.Get[*pglease.Client, pglease.Info]()

// DDL returns the SQL that creates the lease table "[schema.]table" (empty
// means the default, "pglease_leases"), its token sequence and the
// objects beside them, for users' own migration tools (golang-migrate,
// goose, atlas, Alembic…). It is idempotent, and upgrades a table of any
// earlier schema version. An invalid name is reported as an
// *[pglease.InvalidError] of kind "identifier".
func DDL(table string) (string, error) { return ops.DDL(table) }

// Migrate creates the table of c ([pglease.Config.Table]) and its sequence
// when missing, upgrades a table of an earlier schema version and checks
// the layout of an existing table. A client does this itself before its
// first acquisition, and again before the next one once it found its
// table gone (the leases in it end when it finds that, at their next
// renewal at the latest), unless [pglease.Config.DisableAutoMigrate] is
// set: a client that may not create tables leaves it to a deploy step
// that calls Migrate (or `pglease migrate`, or applies [DDL]).
// [ForceRelease], [pglease.Client.RequestStepDown] and [Cleanup] only
// check or upgrade a table that exists (they never create one:
// [pglease.ErrNoTable]); [pglease.Client.Get], [List] and [Waiters] never
// change anything.
//
// Any number of clients may migrate at once, each spelling the table its
// own way ("pglease_leases", "public.pglease_leases", another
// search_path): they serialize on a lock of the table's schema as the
// server resolves it, so exactly one creates or upgrades what is missing.
// Its locks of the tables are taken with a short lock_timeout (200 ms): a
// migration behind an open transaction on the tables (a report, pg_dump)
// gives up, so that renewals and other statements never queue behind it
// for longer, logs a warning naming the sessions that hold the locks, and
// tries again, with growing pauses, until ctx ends; its error then names
// those sessions and matches ctx's error.
func Migrate(ctx context.Context, c *pglease.Client) error { return ops.Migrate(c, ctx) }

// TableExists reports whether c's lease table exists in the database, so
// that a tool can refuse to act on a table name nobody created (a typo)
// rather than create it or read it as empty. It only reads the catalog
// and the table's description, each time it is called; a table of that
// name that pglease cannot use (of another shape, or made by a newer
// version) is an error that says so.
func TableExists(ctx context.Context, c *pglease.Client) (bool, error) {
	return ops.TableExists(c, ctx)
}

// List returns every lease row of c's table, held or expired, ordered by
// name. Like [pglease.Client.Get] it only reads and needs only SELECT on
// the table; without the table it returns an empty slice. A row is held
// while its Remaining is positive, and its holder is stale (alive but not
// renewing) when its HeartbeatAge is also over a threshold of yours, both
// by the server's clock.
func List(ctx context.Context, c *pglease.Client) ([]pglease.Info, error) { return ops.List(c, ctx) }

// ForceRelease deletes the lease of name whoever holds it, wakes its
// waiters, and returns what it deleted; name may be a slot's ("name#i",
// see [pglease.WithSlots]) or a shared row's. It is an administrative
// action: the holder learns of it at its next renewal and its lease ends
// with [pglease.ErrLeaseLost]. It returns an error matching
// [pglease.ErrNoLease] when the table has no row for name, and
// [pglease.ErrNoTable] when there is no table: it never creates one.
func ForceRelease(ctx context.Context, c *pglease.Client, name string) (pglease.Info, error) {
	return ops.ForceRelease(c, ctx, name)
}

// Cleanup deletes the expired rows of c's table and returns how many.
// Tokens are unaffected: they keep increasing. Without the table it
// returns [pglease.ErrNoTable]: it never creates one.
func Cleanup(ctx context.Context, c *pglease.Client) (int64, error) { return ops.Cleanup(c, ctx) }

// Waiter is a client queued for a lease name (see "Waiting" in package
// pglease's documentation): who waits, and since when by the server's
// clock.
type Waiter struct {
	Name   string        // the name waited for
	Owner  string        // the waiting client's owner label ("" in a registration of schema version 6)
	Since  time.Time     // server time it queued
	Waited time.Duration // how long it has waited, by the server's clock
	// Kind is the kind of lease it waits for: "plain" for an exclusive
	// lease (plain or [pglease.WithFastFailover]); for a lease whose
	// holders share the name, the kind of the rows that share it now
	// ([pglease.Info.Kind]: "shared" for [pglease.WithShared], "quota"
	// for [pglease.WithQuota], or the word of a kind a later version adds,
	// as it is), or "shared" when none is held.
	Kind string
}

// Waiters returns the clients queued for names in c's table, or for every
// name when none is given: per name, the first in line first (the one a
// release wakes, and to which a free lease is promised once its turn is
// 100 ms old). A client is listed once per name, however many of its
// goroutines wait for it (they queue locally), and only while it is
// alive: a registration whose client's dedicated session ended, or that
// its attempts stopped refreshing, is not shown.
//
// The queue holds the blocked [pglease.Client.Acquire] calls of single
// names, from their first refused attempt on: exclusive (plain or
// [pglease.WithFastFailover]), [pglease.WithShared] and
// [pglease.WithQuota] waits of clients with a dedicated session (pgx:
// [pglease.Open], [pglease.NewFromPool], or database/sql with pgx's
// driver; not with [pglease.Config.DisableNotify] or behind a
// transaction-pooling proxy). Without one, a quota's wait is listed too,
// and so is an exclusive wait that shared holders refused: each registers
// as a polling waiter, listed while its attempts refresh it. A wait for a
// semaphore's slot or for a set does not queue
// ([pglease.Client.AcquireAll]), nor does [pglease.Client.TryAcquire].
//
// Like [List] it only reads (it needs SELECT on the table and on its
// waiters table, "<table>_waiters"); without the table it returns an empty
// slice.
func Waiters(ctx context.Context, c *pglease.Client, names ...string) ([]Waiter, error) {
	ws, err := ops.Waiters(c, ctx, names...)
	if err != nil {
		return nil, err
	}
	out := make([]Waiter, len(ws))
	for i, w := range ws {
		out[i] = Waiter(w)
	}
	return out, nil
}
