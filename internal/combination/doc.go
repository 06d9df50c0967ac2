// Package combination is pglease's combination test (SPEC §1.7).
package combination
