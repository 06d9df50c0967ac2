// Package adminhook hands package admin the root package's administrative
// operations, which the root package keeps unexported so that its API is
// the one of an application that holds leases (as grpc-go's internal
// package hands its subpackages what package grpc does not export).
//
// The root package sets them once, in its init; package admin imports the
// root package, so it is initialized after it and finds them set. The
// operations are typed by the root package's own types, given here as type
// parameters (this package cannot import the root package, which imports
// it): Set and Get must be instantiated with the same ones, which admin's
// tests check by calling every operation.
package adminhook

import (
	"context"

	"github.com/pglease/pglease/internal/store"
)

// Ops are the operations, for a client of type C whose lease rows read as
// I: the root package's method expressions, so the client comes first.
type Ops[C, I any] struct {
	DDL          func(table string) (string, error)
	Migrate      func(c C, ctx context.Context) error
	TableExists  func(c C, ctx context.Context) (bool, error)
	List         func(c C, ctx context.Context) ([]I, error)
	Waiters      func(c C, ctx context.Context, names ...string) ([]store.Waiter, error)
	ForceRelease func(c C, ctx context.Context, name string) (I, error)
	Cleanup      func(c C, ctx context.Context) (int64, error)
}

var ops any

// Set records the root package's operations.
func Set[C, I any](o Ops[C, I]) { ops = o }

// Get returns what Set recorded; it panics when Set was not called with
// the same type parameters, a mistake no program can make at run time
// without every test of package admin failing first.
func Get[C, I any]() Ops[C, I] { return ops.(Ops[C, I]) }
