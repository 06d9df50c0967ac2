//go:build !unix

package cli

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// Process groups, the supervisor and signal forwarding need Unix; elsewhere
// pglease run refuses to start (the admin commands work).
const supported = false

const superviseCmd = "__supervise"

var forwarded = []os.Signal{os.Interrupt}

var jobControl []os.Signal

var brokenPipe []os.Signal

type supervisor struct {
	done   chan struct{}
	code   int
	signal int
	lapsed bool
	err    error
}

func startSupervisor(child, *env) (*supervisor, error) {
	return nil, errors.New("commands cannot be supervised on this platform")
}

func signalName(s syscall.Signal) string { return s.String() }

func (*supervisor) terminate()             {}
func (*supervisor) kill()                  {}
func (*supervisor) forward(syscall.Signal) {}
func (*supervisor) enforcesDeadline() bool { return false }
func (*supervisor) setDeadline(time.Time)  {}

func supervise([]string, io.Writer) int { return exitError }
