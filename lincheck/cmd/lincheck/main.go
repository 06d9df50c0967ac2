// Command lincheck checks every history file (*.jsonl) in the directories
// it is given for linearizability against the fenced-register model of
// package lincheck, and exits 1 if any history is not linearizable, could
// not be checked in time or read, or if there is no history at all (so
// that a test run that wrote none does not pass unnoticed).
//
//	lincheck [-timeout 2m] [-html DIR] DIR...
//
// With -html, the porcupine view of every history that fails is written to
// DIR/<history>.html.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/pglease/pglease/lincheck"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lincheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Minute, "give up on a history after this long (it then fails)")
	html := fs.String("html", "", "write the porcupine view of each failing history into this directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: lincheck [-timeout 2m] [-html DIR] DIR...")
		return 2
	}
	var files []string
	for _, dir := range fs.Args() {
		found, err := lincheck.Files(dir)
		if err != nil {
			fmt.Fprintln(stderr, "lincheck:", err)
			return 1
		}
		files = append(files, found...)
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "lincheck: no history (*.jsonl) in %s\n", strings.Join(fs.Args(), " "))
		return 1
	}
	failed, ops := 0, 0
	for _, f := range files {
		h, err := lincheck.ReadFile(f)
		if err != nil {
			fmt.Fprintln(stderr, "lincheck:", err)
			failed++
			continue
		}
		start := time.Now()
		r := lincheck.Check(h, *timeout)
		ops += r.Ops
		name := filepath.Base(f)
		fmt.Fprintf(stdout, "%-6s %s: %d operations on %d keys (%v)\n", verdict(r.Verdict), name, r.Ops, r.Keys, time.Since(start).Round(time.Millisecond))
		if r.Verdict == porcupine.Ok {
			continue
		}
		failed++
		for _, p := range r.Problems {
			fmt.Fprintln(stdout, "  "+p)
		}
		if *html != "" {
			out := filepath.Join(*html, strings.TrimSuffix(name, ".jsonl")+".html")
			if err := r.Visualize(out); err != nil {
				fmt.Fprintln(stderr, "lincheck:", err)
			} else {
				fmt.Fprintln(stdout, "  view:", out)
			}
		}
	}
	fmt.Fprintf(stdout, "lincheck: %d histories, %d operations, %d not linearizable or not checked\n", len(files), ops, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

func verdict(v porcupine.CheckResult) string {
	switch v {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "ILLEGAL"
	}
	return "TIMEOUT"
}
