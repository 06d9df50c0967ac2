package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// history lines: holder 1 acquires and writes; holder 2 acquires; then
// holder 1's write is accepted after all (bad) or rejected (good).
const (
	prefix = `{"op":"acquire","key":"job","token":1,"client":1,"call":1,"return":2}
{"op":"write","key":"job","token":1,"value":10,"guarded":true,"outcome":"ok","client":1,"call":3,"return":4}
{"op":"acquire","key":"job","token":2,"client":2,"call":5,"return":6}
`
	goodTail = `{"op":"write","key":"job","token":1,"value":11,"guarded":true,"outcome":"rejected","client":1,"call":7,"return":8}` + "\n"
	badTail  = `{"op":"write","key":"job","token":1,"value":11,"guarded":true,"outcome":"ok","client":1,"call":7,"return":8}` + "\n"
)

func TestExitStatusSaysWhetherEveryHistoryIsLinearizable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errs bytes.Buffer
	if code := run([]string{dir}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "no history") {
		t.Fatalf("empty directory: exit %d, stderr %q", code, errs.String())
	}
	write("good.jsonl", prefix+goodTail)
	out.Reset()
	if code := run([]string{dir}, &out, &errs); code != 0 {
		t.Fatalf("good history: exit %d\n%s", code, out.String())
	}
	write("bad.jsonl", prefix+badTail)
	out.Reset()
	html := t.TempDir()
	code := run([]string{"-html", html, dir}, &out, &errs)
	if code != 1 || !strings.Contains(out.String(), "ILLEGAL bad.jsonl") || !strings.Contains(out.String(), `key "job"`) {
		t.Fatalf("bad history: exit %d\n%s", code, out.String())
	}
	if _, err := os.Stat(filepath.Join(html, "bad.html")); err != nil {
		t.Fatalf("no view of the bad history: %v", err)
	}
}
