// Package admin is what operators' tools do to a lease table: create or
// upgrade it, list its leases and the clients waiting for them, release a
// lease whoever holds it, delete expired rows, and print the statements
// that create it for a migration tool of one's own.
//
// An application that holds leases needs none of this: package pglease
// creates its table on first use and reads a lease with [pglease.Client.Get].
// The pglease command (ls, waiters, release --force, cleanup, migrate,
// schema), its console and the metrics adapters are built on this package.
//
// Every function but [DDL] acts on the table of the [pglease.Client] it is
// given, through that client's connections, with its retries and its
// errors ([pglease.ErrNoTable], [pglease.ErrClosed], ...). Reads need only
// SELECT on the table (and on its waiters table, "<table>_waiters");
// [ForceRelease] and [Cleanup] need to delete its rows; [Migrate] needs a
// role that may create the table, or that owns it to upgrade it.
//
// The functions are safe for concurrent use, as the client is.
package admin
