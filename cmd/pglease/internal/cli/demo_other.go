//go:build !unix

package cli

import (
	"context"
	"errors"
	"io"
)

var demoFlags = []flagSpec{}

const demoJobCmd = "__demo-job"

func (e *env) cmdDemo(context.Context, []string) int {
	return e.fail(errors.New("pglease demo is not supported on this platform"))
}

func demoJob(context.Context, []string, io.Writer) int { return exitError }
