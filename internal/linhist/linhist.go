// Package linhist writes the histories of the fault suite (internal/chaos)
// and the combination test (internal/combination) for the external
// linearizability checker, the nested module lincheck, which checks them
// with porcupine against a model of fenced registers.
//
// A history is a file of JSON lines, one [Op] per line: the acquisitions,
// releases and fenced writes of each lease row, and reads of the register
// the writes go to. The format is the contract between the two modules
// (they share no code); lincheck's package documentation defines it, and
// its reader refuses unknown fields, so that a change on one side alone
// fails the check instead of passing unread.
//
// The tests write a history when [EnvDir] names a directory; lincheck
// checks every history there:
//
//	PGLEASE_HISTORY_DIR=/tmp/h go test ./internal/chaos/ ./internal/combination/
//	cd lincheck && go run ./cmd/lincheck /tmp/h
package linhist

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// EnvDir names the environment variable that makes the tests write their
// histories into a directory.
const EnvDir = "PGLEASE_HISTORY_DIR"

// Operation kinds.
const (
	Acquire = "acquire" // Token was granted on Key
	Release = "release" // the holder of Token released Key
	Write   = "write"   // a write of Value with Token to Key's register
	Read    = "read"    // a read of Key's register returned Value
)

// Write outcomes.
const (
	OK       = "ok"       // committed
	Rejected = "rejected" // not committed
	Unknown  = "unknown"  // the writer does not know (a lost reply)
)

// Op is one operation of a history: what Client did to Key between Call
// and Return (wall clock, Unix nanoseconds; Return 0 when no return was
// observed: the process died first).
type Op struct {
	Op    string `json:"op"`
	Key   string `json:"key"`
	Token int64  `json:"token,omitempty"`
	// Value: write, the value written; read, the value read (0 for a
	// register never written).
	Value int64 `json:"value,omitempty"`
	// Guarded: the write checked the lease with Lease.Guard in its own
	// transaction; otherwise it was accepted by a token fence alone (the
	// token at least the greatest accepted).
	Guarded bool   `json:"guarded,omitempty"`
	Outcome string `json:"outcome,omitempty"` // write: OK, Rejected or Unknown
	Client  int    `json:"client"`
	Call    int64  `json:"call"`
	Return  int64  `json:"return,omitempty"`
}

// Dir returns the directory named by [EnvDir], or "" when it is unset.
func Dir() string { return os.Getenv(EnvDir) }

// Save writes ops to dir/name.jsonl (name made safe for a file name),
// replacing any file of that name, and returns its path.
func Save(dir, name string, ops []Op) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, FileName(name))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// FileName turns a test's name into a history file name: letters, digits,
// '-' and '.' kept, anything else '_', and ".jsonl" appended.
func FileName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, name) + ".jsonl"
}
