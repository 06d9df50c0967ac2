package pgleaseprom

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The alert rules shipped in docs/ and their unit tests.
const (
	rulesFile      = "../docs/pglease-alerts.yml"
	rulesTestsFile = "../docs/pglease-alerts_test.yml"
)

// consoleMetrics are the metrics of `pglease serve` (the console) that the
// rules use.
var consoleMetrics = []string{
	"pglease_table_leases", "pglease_table_oldest_heartbeat_age_seconds", "pglease_table_exists",
	"pglease_table_last_refresh_timestamp_seconds", "pglease_console_viewers", "pglease_console_listener_up",
}

// promtool returns the path of promtool: $PGLEASE_PROMTOOL when it names a
// file, else promtool on PATH. Without one the test is skipped, unless
// $CI or $PGLEASE_PROMTOOL is set: then it fails.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PGLEASE_PROMTOOL"); p != "" && strings.ContainsRune(p, filepath.Separator) {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	msg := "promtool not found (install Debian's prometheus package for promtool): " + err.Error()
	if os.Getenv("CI") != "" || os.Getenv("PGLEASE_PROMTOOL") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out)
}

// promtool accepts the rules file.
func TestAlertRulesCheck(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
}

// The rules' unit tests pass: the alerts fire, with their labels and
// annotations, when they should and not otherwise.
func TestAlertRulesUnitTests(t *testing.T) {
	runPromtool(t, "test", "rules", rulesTestsFile)
}

// Every pglease_ metric the rules use is one this package or the console
// exports: a renamed metric cannot leave an alert that never fires.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	known := append(metricNames("pglease"), consoleMetrics...)
	var exprs []string
	for line := range strings.Lines(string(rules)) {
		if _, expr, ok := strings.Cut(line, "expr:"); ok && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			exprs = append(exprs, expr)
		}
	}
	if len(exprs) < 5 {
		t.Fatalf("%d expressions found in %s", len(exprs), rulesFile)
	}
	used := map[string]bool{}
	for _, expr := range exprs {
		for _, m := range regexp.MustCompile(`\bpglease_[a-z_]+`).FindAllString(expr, -1) {
			base := m
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(known, b) {
					base = b
				}
			}
			if !slices.Contains(known, base) {
				t.Errorf("%s uses %s, which nothing exports", rulesFile, m)
			}
			used[base] = true
		}
	}
	t.Logf("metrics used by the rules: %v", used)
}
