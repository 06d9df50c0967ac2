package cli

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
)

// The library's log reads as pglease's own messages: the prefix once, the
// level when it is a warning or an error, attributes in parentheses, the
// error last, passwords redacted, records below Info dropped.
func TestLineHandlerWritesPgleasesFormat(t *testing.T) {
	var out bytes.Buffer
	e := &env{stderr: &out, getenv: func(string) string { return "" }, secrets: []string{"s3cret"}}
	log := slog.New(newLineHandler(e))
	log.Warn("pgleasecron: register the job failed; retrying", "job", "nightly", "err", errors.New("dial postgres://u:s3cret@db: refused"))
	log.With("table", "ops.leases").WithGroup("lease").Info("pglease: acquired", "name", "a b", "token", 7)
	log.Debug("dropped")
	log.Error("pglease: gone")
	want := "pglease: warning: pgleasecron: register the job failed; retrying (job=nightly): dial postgres://u:xxxxx@db: refused\n" +
		"pglease: acquired (table=ops.leases, lease.name=\"a b\", lease.token=7)\n" +
		"pglease: error: gone\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}
