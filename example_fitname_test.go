package pglease_test

import (
	"fmt"

	"github.com/pglease/pglease"
)

// An adapter whose keys may be any string the tool accepts gives each a
// lease name of its own: a valid one as it is, another fitted.
func ExampleFitName() {
	fmt.Println(pglease.FitName("gocron:", "nightly-report", 0))
	fmt.Println(pglease.FitName("gocron:", "shard#1", 0))
	// Output:
	// gocron:nightly-report
	// gocron:shard#1~98773b26002969d748685606bf1181b4
}
