package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// lineHandler writes the library's log records as pglease's own messages
// are written, one line each on stderr, so that an operator (or systemd's
// journal) sees one format: "pglease: warning: <message> (key=value ...)".
// The message's own "pglease: " prefix is not repeated; a warning or an
// error says so after the prefix; an "err" attribute ends the line, after
// a colon, as the tool's own errors do; records below Info are dropped.
type lineHandler struct {
	mu    *sync.Mutex
	out   func(string) // writes a line, passwords redacted
	attrs []slog.Attr
	group string // the WithGroup prefix of the attributes' keys, "a.b."
}

func newLineHandler(e *env) *lineHandler {
	return &lineHandler{mu: &sync.Mutex{}, out: func(s string) {
		fmt.Fprint(e.stderr, e.redact(s))
	}}
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("pglease: ")
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(strings.TrimPrefix(r.Message, "pglease: "))
	var kv []string
	var errText string
	for _, a := range h.attrs {
		kv = appendAttr(kv, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" && h.group == "" {
			errText = a.Value.String()
			return true
		}
		kv = appendAttr(kv, h.group, a)
		return true
	})
	if len(kv) > 0 {
		b.WriteString(" (" + strings.Join(kv, ", ") + ")")
	}
	if errText != "" {
		b.WriteString(": " + errText)
	}
	b.WriteString("\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.out(b.String())
	return nil
}

// appendAttr appends a as "key=value", a group's attributes as
// "group.key=value"; strings with spaces are quoted.
func appendAttr(kv []string, prefix string, a slog.Attr) []string {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return kv
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			kv = appendAttr(kv, p, g)
		}
		return kv
	}
	v := a.Value.String()
	if strings.ContainsAny(v, " \t\n\"=,()") || v == "" {
		v = fmt.Sprintf("%q", v)
	}
	return append(kv, prefix+a.Key+"="+v)
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		if h.group != "" {
			a.Key = h.group + a.Key
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}
