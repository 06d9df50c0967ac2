package human

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond:        "850ms",
		12300 * time.Millisecond:      "12.3s",
		4*time.Minute + 5*time.Second: "4m05s",
		2*time.Hour + 3*time.Minute:   "2h03m",
		76 * time.Hour:                "3d04h",
		-1500 * time.Millisecond:      "-1.5s",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		kind         string
		weight, size int
		want         string
	}{
		{"plain", 1, 0, ""},
		{"", 0, 0, ""},
		{"semaphore", 1, 3, ""},
		{"shared", 1, 0, "shared"},
		{"later", 3, 10, "later, 3 of 10"},
		{"later", 1, 0, "later"},
	} {
		if got := Kind(tc.kind, tc.weight, tc.size); got != tc.want {
			t.Errorf("Kind(%q, %d, %d) = %q, want %q", tc.kind, tc.weight, tc.size, got, tc.want)
		}
	}
}
