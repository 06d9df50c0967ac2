//go:build !unix

package cli

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// Process groups, the supervisor and signal forwarding need Unix; elsewhere
// pglease run refuses to start (the admin commands work).
const supported = false

const superviseCmd = "__supervise"

var forwarded = []os.Signal{os.Interrupt}

type supervisor struct {
	done chan struct{}
	code int
	err  error
}

func startSupervisor(runOptions, []string, *env) (*supervisor, error) {
	return nil, errors.New("pglease run is not supported on this platform")
}

func (*supervisor) terminate()             {}
func (*supervisor) kill()                  {}
func (*supervisor) forward(syscall.Signal) {}

func supervise([]string, io.Writer) int { return exitError }
