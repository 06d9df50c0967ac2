package pglease

import (
	"context"
	"errors"

	"github.com/pglease/pglease/internal/adminhook"
	"github.com/pglease/pglease/internal/store"
)

// The administrative operations: what package admin exports as functions
// of a *Client (see their documentation there), kept unexported here so
// that this package's API is the one of an application that holds leases.

func init() {
	adminhook.Set(adminhook.Ops[*Client, Info]{
		DDL:          schemaDDL,
		Migrate:      (*Client).migrate,
		TableExists:  (*Client).tableExists,
		List:         (*Client).list,
		Waiters:      (*Client).waiters,
		ForceRelease: (*Client).forceRelease,
		Cleanup:      (*Client).cleanup,
	})
}

// schemaDDL returns the statements that create or upgrade the lease table.
func schemaDDL(table string) (string, error) {
	st, err := newStore(table)
	if err != nil {
		return "", err
	}
	return st.DDL(), nil
}

// migrate creates or upgrades the lease table, serialized with the other
// clients' migrations; ensureSchema runs it once per client.
func (c *Client) migrate(ctx context.Context) error {
	if err := c.life.checkOpen(); err != nil {
		return err
	}
	c.schema.mu.Lock()
	defer c.schema.mu.Unlock()
	if err := c.st.EnsureSchema(ctx, c.db); err != nil {
		// The step that failed names itself: a check of a table that
		// exists is not its creation.
		op := "migrate the lease table " + c.st.Names.QualifiedTable()
		if st := (*store.StepError)(nil); errors.As(err, &st) {
			op, err = st.Action, st.Err
		}
		return opError(op, err)
	}
	if c.schema.lostTable {
		c.cfg.Logger.WarnContext(ctx, "pglease: the lease table had disappeared (dropped, or lost in a failover or a restore) and was migrated again, created anew if no other client had done so first;"+
			" a new token sequence starts at the server clock in microseconds, above the tokens the lost one handed out", "table", c.st.Names.QualifiedTable())
	}
	c.schema.ready, c.schema.lostTable = true, false
	return nil
}

// tableExists reports whether the lease table exists, reading the catalog
// each time (readable does once and remembers a success, which this check
// records too, so that the read that follows asks nothing again); a table
// that exists but is not one pglease can read (of another shape, or of a
// newer version) is an error.
func (c *Client) tableExists(ctx context.Context) (bool, error) {
	if err := c.life.checkOpen(); err != nil {
		return false, err
	}
	return c.checkReadable(ctx)
}

// list reads every lease row, held or expired, ordered by name.
func (c *Client) list(ctx context.Context) ([]Info, error) {
	var recs []store.Record
	err := c.read(ctx, "list leases", func() (err error) {
		recs, err = c.st.List(ctx, c.db)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Info, len(recs))
	for i, r := range recs {
		out[i] = infoOf(r)
	}
	return out, nil
}

// waiters reads the live waiters queued for names (every name when none
// is given), in queue order per name.
func (c *Client) waiters(ctx context.Context, names ...string) ([]store.Waiter, error) {
	for _, n := range names {
		if err := checkName(n); err != nil {
			return nil, err
		}
	}
	var ws []store.Waiter
	err := c.read(ctx, "list waiters", func() (err error) {
		ws, err = c.st.Waiters(ctx, c.db, names)
		return err
	})
	return ws, err
}

// forceRelease deletes the row of name whoever holds it and wakes its
// waiters.
func (c *Client) forceRelease(ctx context.Context, name string) (Info, error) {
	if err := checkRowName(name); err != nil {
		return Info{}, err
	}
	if err := c.prepareExisting(ctx); err != nil {
		return Info{}, err
	}
	rec, ok, err := c.st.ForceRelease(ctx, c.db, name)
	if err != nil {
		return Info{}, c.existingError(ctx, "force-release", err)
	}
	if !ok {
		return Info{}, errorf("%w: %q", ErrNoLease, name)
	}
	return infoOf(rec), nil
}

// cleanup deletes expired rows and returns how many.
func (c *Client) cleanup(ctx context.Context) (int64, error) {
	if err := c.prepareExisting(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := c.retry(ctx, func() (err error) {
		n, err = c.st.Cleanup(ctx, c.db)
		return err
	})
	if err != nil {
		return 0, c.existingError(ctx, "clean up", err)
	}
	return n, nil
}
