package linhist

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The lines a history file holds are the contract with lincheck, which
// refuses fields it does not know: this pins their spelling.
func TestSaveWritesOneJSONObjectPerLine(t *testing.T) {
	dir := t.TempDir()
	path, err := Save(dir, "chaos-Soak/fast failover", []Op{
		{Op: Acquire, Key: "job#1", Token: 7, Client: 3, Call: 100, Return: 120},
		{Op: Write, Key: "job#1", Token: 7, Value: 42, Guarded: true, Outcome: OK, Client: 3, Call: 130},
		{Op: Read, Key: "job", Client: 0, Call: 140, Return: 150},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "chaos-Soak_fast_failover.jsonl"); path != want {
		t.Errorf("path %q, want %q", path, want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`{"op":"acquire","key":"job#1","token":7,"client":3,"call":100,"return":120}`,
		`{"op":"write","key":"job#1","token":7,"value":42,"guarded":true,"outcome":"ok","client":3,"call":130}`,
		`{"op":"read","key":"job","client":0,"call":140,"return":150}`,
	}, "\n") + "\n"
	if string(b) != want {
		t.Fatalf("got\n%s\nwant\n%s", b, want)
	}
}
