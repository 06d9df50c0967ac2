//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package cli

import "os"

// diagThread does nothing here.
func diagThread() {}

// mutedTerminal cannot tell here.
func mutedTerminal(*os.File) bool { return false }
