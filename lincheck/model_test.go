package lincheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Times in the tests are small integers: only their order matters.
func acq(client int, key string, tok, call, ret int64) Op {
	return Op{Op: Acquire, Key: key, Token: tok, Client: client, Call: call, Return: ret}
}

func rel(client int, key string, tok, call, ret int64) Op {
	return Op{Op: Release, Key: key, Token: tok, Client: client, Call: call, Return: ret}
}

func write(client int, key string, tok, value int64, outcome string, call, ret int64) Op {
	return Op{Op: Write, Key: key, Token: tok, Value: value, Guarded: true, Outcome: outcome, Client: client, Call: call, Return: ret}
}

func read(key string, value, call, ret int64) Op {
	return Op{Op: Read, Key: key, Value: value, Call: call, Return: ret}
}

// good is a linearizable history: holder 1 writes and releases, holder 2
// acquires, a stale write of holder 1 is rejected, holder 2 writes and a
// read sees its value; on another key, a write concurrent with a newer
// acquisition, accepted (it may have come first), and a write whose
// outcome is unknown.
func good() []Op {
	return []Op{
		acq(1, "job", 1, 1, 2),
		write(1, "job", 1, 10, OK, 3, 4),
		read("job", 10, 5, 6),
		rel(1, "job", 1, 7, 8),
		acq(2, "job", 2, 9, 10),
		write(1, "job", 1, 11, Rejected, 11, 12),
		write(2, "job", 2, 20, OK, 13, 14),
		read("job", 20, 15, 16),

		acq(1, "job#0", 5, 1, 2),
		acq(2, "job#0", 6, 3, 10),
		write(1, "job#0", 5, 50, OK, 4, 5),
		write(2, "job#0", 6, 60, Unknown, 11, 12),
		read("job#0", 50, 13, 14),
	}
}

func TestModelAcceptsALinearizableHistory(t *testing.T) {
	if r := Check(good(), time.Minute); r.Verdict != porcupine.Ok {
		t.Fatalf("verdict %s: %v", r.Verdict, r.Problems)
	}
}

// Each history is good() plus what makes it not linearizable: the model
// rejects it, naming the key.
func TestModelRejectsWhatIsNotLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  []Op
		key  string
	}{
		{"a stale holder's guarded write accepted after a newer token was acquired", []Op{
			write(1, "job", 1, 12, OK, 17, 18),
		}, "job"},
		{"a stale holder's write accepted after a newer token's write", []Op{
			acq(3, "b", 1, 1, 2), acq(4, "b", 2, 3, 4),
			write(4, "b", 2, 20, OK, 5, 6),
			{Op: Write, Key: "b", Token: 1, Value: 10, Outcome: OK, Client: 3, Call: 7, Return: 8}, // unguarded: the fence
		}, "b"},
		{"a guarded write accepted after its own release", []Op{
			write(2, "job", 2, 21, OK, 30, 31), rel(2, "job", 2, 32, 33), write(2, "job", 2, 22, OK, 34, 35),
		}, "job"},
		{"a token acquired after a greater one", []Op{
			acq(3, "c", 7, 1, 2), acq(4, "c", 6, 3, 4),
		}, "c"},
		{"a token acquired twice", []Op{
			acq(3, "c", 7, 1, 2), acq(4, "c", 7, 3, 4),
		}, "c"},
		{"a read of an overwritten value", []Op{
			read("job", 10, 17, 18),
		}, "job"},
		{"a read of a value never written", []Op{
			read("job#0", 99, 15, 16),
		}, "job#0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(append(good(), tc.add...), time.Minute)
			if r.Verdict != porcupine.Illegal {
				t.Fatalf("verdict %s, want Illegal", r.Verdict)
			}
			if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], `key "`+tc.key+`"`) {
				t.Fatalf("problems %q, want one about %q", r.Problems, tc.key)
			}
		})
	}
}

// An operation that never returned may take effect at any time after its
// call: a write whose writer died may be read later.
func TestOpenOperationsTakeEffectAnyTimeAfterTheirCall(t *testing.T) {
	h := []Op{
		acq(1, "k", 1, 1, 2),
		write(1, "k", 1, 10, OK, 3, 0),
		read("k", 0, 4, 5),
		read("k", 10, 6, 7),
	}
	if r := Check(h, time.Minute); r.Verdict != porcupine.Ok {
		t.Fatalf("verdict %s: %v", r.Verdict, r.Problems)
	}
	h = append(h, read("k", 0, 8, 9)) // but once seen, it stays
	if r := Check(h, time.Minute); r.Verdict != porcupine.Illegal {
		t.Fatalf("verdict %s, want Illegal", r.Verdict)
	}
}

func TestReadFileRefusesWhatItDoesNotKnow(t *testing.T) {
	dir := t.TempDir()
	for name, line := range map[string]string{
		"unknown field": `{"op":"acquire","key":"k","token":1,"client":1,"call":1,"return":2,"tokn":3}`,
		"unknown op":    `{"op":"steal","key":"k","token":1,"client":1,"call":1,"return":2}`,
		"no outcome":    `{"op":"write","key":"k","token":1,"client":1,"call":1,"return":2}`,
		"no call":       `{"op":"read","key":"k","client":1}`,
	} {
		path := filepath.Join(dir, "h.jsonl")
		if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(path); err == nil {
			t.Errorf("%s: read without an error", name)
		}
	}
}
