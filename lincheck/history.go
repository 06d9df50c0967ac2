package lincheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Operation kinds.
const (
	Acquire = "acquire"
	Release = "release"
	Write   = "write"
	Read    = "read"
)

// Write outcomes.
const (
	OK       = "ok"
	Rejected = "rejected"
	Unknown  = "unknown"
)

// Op is one operation of a history (see the package documentation).
type Op struct {
	Op      string `json:"op"`
	Key     string `json:"key"`
	Token   int64  `json:"token,omitempty"`
	Value   int64  `json:"value,omitempty"`
	Guarded bool   `json:"guarded,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Client  int    `json:"client"`
	Call    int64  `json:"call"`
	Return  int64  `json:"return,omitempty"`
}

// check reports what is wrong with op, if anything.
func (op Op) check() error {
	switch op.Op {
	case Acquire, Release:
		if op.Token <= 0 {
			return fmt.Errorf("%s without a token", op.Op)
		}
	case Write:
		if op.Token <= 0 {
			return fmt.Errorf("write without a token")
		}
		if op.Outcome != OK && op.Outcome != Rejected && op.Outcome != Unknown {
			return fmt.Errorf("write with outcome %q", op.Outcome)
		}
	case Read:
	default:
		return fmt.Errorf("unknown op %q", op.Op)
	}
	switch {
	case op.Key == "":
		return fmt.Errorf("%s without a key", op.Op)
	case op.Call <= 0:
		return fmt.Errorf("%s without a call time", op.Op)
	case op.Return != 0 && op.Return < op.Call:
		return fmt.Errorf("%s returned before its call", op.Op)
	}
	return nil
}

// ReadFile reads a history file.
func ReadFile(path string) ([]Op, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ops []Op
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		var op Op
		if err := dec.Decode(&op); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if err := op.check(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		ops = append(ops, op)
	}
	return ops, sc.Err()
}

// Files returns the history files in dir, sorted.
func Files(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	sort.Strings(files)
	return files, err
}
