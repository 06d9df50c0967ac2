// Package lincheck checks pglease's recorded histories for
// linearizability with porcupine (github.com/anishathalye/porcupine, the
// checker etcd's robustness suite uses), against a model of fenced
// registers. It is a module of its own so that the library's module keeps
// pgx as its only requirement; it shares no code with the library: the
// history file format below is the contract between the tests that write
// histories (internal/chaos and internal/combination, through
// internal/linhist) and this checker.
//
// # Model
//
// Every lease row (a name, or a semaphore's slot "name#i") is a fenced
// register. Its state is the greatest token acquired so far, whether that
// token's holder still holds it (not released), the greatest token of an
// accepted write (the fence) and the last accepted value. Operations:
//
//   - acquire(token): legal only if token is greater than every token
//     acquired before (tokens strictly increase in real-time order); the
//     token becomes the current one, held.
//   - release(token): the current token, if it is this one, is no longer
//     held.
//   - write(token, value), guarded (Lease.Guard in the writer's
//     transaction): accepted only if token is the current token, still
//     held, and not below the fence; it then becomes the fence and the
//     value the register's. A guarded write of a stale holder, accepted
//     after a newer token was acquired (or after its own release), is
//     therefore illegal.
//   - write(token, value), unguarded (a resource that only knows tokens):
//     accepted only if token is not below the fence.
//   - A rejected write changes nothing and is always legal (a lease may
//     end for reasons the history does not show). A write whose outcome is
//     unknown (its reply was lost) may or may not have been accepted.
//   - read: returns the last accepted value (0 before the first write).
//
// Acquisitions that the history does not show (a process killed before it
// recorded one) only make the model more permissive, never stricter: the
// check finds no violation that did not happen. Releases may be left out.
//
// # History files
//
// A history is a file of JSON lines ("*.jsonl"), one operation per line,
// with these fields (unknown fields are refused, so that the writer and
// this reader cannot drift apart unnoticed):
//
//	op       "acquire", "release", "write" or "read"
//	key      the lease row ("job", "job#1")
//	token    the fencing token (acquire, release, write)
//	value    write: the value written; read: the value read (0: never written)
//	guarded  write: true if checked with Lease.Guard in its transaction
//	outcome  write: "ok" (committed), "rejected" or "unknown"
//	client   who made the call (a process id; only for display)
//	call     when the call began: wall clock, Unix nanoseconds
//	return   when it returned; 0 or absent: never (its process died) —
//	         the operation may take effect at any time after its call
//
// Times are comparable across the processes of one machine (they share
// its clock); an operation's interval must contain the moment it took
// effect, so a writer that cannot stamp a call exactly gives an earlier
// time, never a later one (and for a return, a later one).
//
// # Use
//
//	PGLEASE_HISTORY_DIR=/tmp/h go test ./internal/chaos/ ./internal/combination/
//	cd lincheck && go run ./cmd/lincheck /tmp/h
package lincheck
