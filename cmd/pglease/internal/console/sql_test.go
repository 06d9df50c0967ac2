package console

import (
	"strings"
	"testing"
)

// The console finds the objects pglease created: the table, its token
// sequence (shortened with a hash beyond 63 bytes) and its channel.
func TestObjectsAreNamedAsPgleaseNamesThem(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct{ in, table, seq, channel string }{
		{"", `"pglease_leases"`, `"pglease_leases_token_seq"`, "pglease_leases"},
		{"ops.locks", `"ops"."locks"`, `"ops"."locks_token_seq"`, "locks"},
		{long, `"` + long + `"`, `"` + strings.Repeat("a", 44) + `_2469b9e6_token_seq"`, long},
	} {
		got, err := objectsOf(tc.in)
		if err != nil || got != (objects{table: tc.table, seq: tc.seq, channel: tc.channel}) {
			t.Errorf("objectsOf(%q) = %+v, %v; want %s, %s, %s", tc.in, got, err, tc.table, tc.seq, tc.channel)
		}
	}
	if _, err := objectsOf("Ops.locks"); err == nil {
		t.Error("objectsOf accepted an invalid schema name")
	}
}
