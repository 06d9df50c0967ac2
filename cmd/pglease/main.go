// Command pglease runs a command while holding a lease in PostgreSQL and
// administers lease tables. See docs/CLI.md.
package main

import (
	"context"
	"os"

	"github.com/pglease/pglease/cmd/pglease/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
