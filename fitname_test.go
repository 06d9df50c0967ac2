package pglease_test

import (
	"strings"
	"testing"

	"github.com/pglease/pglease"
)

// FitName keeps every name that was valid, and makes a valid name of its
// own for every other key: distinct, within the bytes asked for, the same
// on every call.
func TestFitNameGivesEveryKeyAValidNameOfItsOwn(t *testing.T) {
	long := strings.Repeat("é", 200) // 400 bytes
	keys := []string{
		"nightly", "shard#1", "shard#2", "order#12", "#1", "a#0", long, long + "x", "bad\xffutf8", "nul\x00byte", "",
		"x~0123456789abcdef0123456789abcdef", // looks fitted: fitted again, so that no other key's name can be it
		strings.Repeat("k", 248), strings.Repeat("k", 249),
	}
	seen := map[string]string{}
	for _, max := range []int{0, 251} {
		clear(seen)
		for _, key := range keys {
			name := pglease.FitName("gocron:", key, max)
			limit := max
			if limit == 0 {
				limit = 255
			}
			if _, err := (pglease.Config{}).Plan(name); err != nil || len(name) > limit {
				t.Errorf("FitName(%q, max %d) = %q (%d bytes): %v", key, max, name, len(name), err)
			}
			if other, dup := seen[name]; dup {
				t.Errorf("keys %q and %q share the name %q", other, key, name)
			}
			seen[name] = key
			if again := pglease.FitName("gocron:", key, max); again != name {
				t.Errorf("FitName(%q) is %q, then %q", key, name, again)
			}
		}
	}
	for _, key := range []string{"nightly", "order 12/eu", strings.Repeat("k", 248), "ünïcode"} {
		if got := pglease.FitName("gocron:", key, 0); got != "gocron:"+key {
			t.Errorf("FitName of the valid %q = %q, want it verbatim", key, got)
		}
	}
	if got := pglease.FitName("gocron:", "shard#1", 0); !strings.HasPrefix(got, "gocron:shard#1~") {
		t.Errorf("FitName(shard#1) = %q, want its key readable at the start", got)
	}
}
