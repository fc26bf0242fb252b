package alerttest_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/metricsfx"
	"github.com/redisfx/redisfx/metricsfx/alerttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tool returns the path of a Prometheus tool; CI installs them, so there
// a missing tool fails the test, elsewhere it skips.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (apt-get install prometheus)", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// The checked-in test file is what the generator prints.
func TestCheckedInTestsAreGenerated(t *testing.T) {
	got, err := os.ReadFile(filepath.Join("..", "..", "docs", "monitoring", "rules_test.yml"))
	if err != nil || !bytes.Equal(got, alerttest.Tests(metricsfx.Profile{Prefix: metricsfx.DefaultPrefix}, "rules.yml")) {
		t.Error("docs/monitoring/rules_test.yml is stale: regenerate it with go run ./cmd/redisfx-alerts -tests (see docs/monitoring.md)")
	}
}

// Every alert fires just past its threshold after its For, and stays silent
// just short of it: promtool test rules, on rules generated for a prefix and
// job. The sped-up rules of the end-to-end test are valid rules too.
func TestPromtool_RulesCheckAndUnitTests(t *testing.T) {
	promtool := tool(t, "promtool")
	dir := t.TempDir()
	for _, p := range []metricsfx.Profile{{Prefix: metricsfx.DefaultPrefix}, {Prefix: "payments", Job: "payments-api"}} {
		rules := filepath.Join(dir, p.Prefix+"_rules.yml")
		tests := filepath.Join(dir, p.Prefix+"_rules_test.yml")
		_ = os.WriteFile(rules, metricsfx.AlertRules(p), 0o644)
		_ = os.WriteFile(tests, alerttest.Tests(p, filepath.Base(rules)), 0o644)
		if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
			t.Fatalf("promtool check rules (%s): %v\n%s", p.Prefix, err, out)
		}
		if out, err := exec.Command(promtool, "test", "rules", tests).CombinedOutput(); err != nil {
			t.Fatalf("promtool test rules (%s): %v\n%s", p.Prefix, err, out)
		}
	}
	fast := filepath.Join(dir, "fast_rules.yml")
	_ = os.WriteFile(fast, metricsfx.AlertRules(metricsfx.Profile{Prefix: "payments", Speedup: 60}), 0o644)
	if out, err := exec.Command(promtool, "check", "rules", fast).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules (speedup 60): %v\n%s", err, out)
	}
}

// Every alert has both a firing and a calm test input, and the eight alerts of
// the threshold table (docs/monitoring.md) are all there.
func TestEveryAlertIsTestedBothWays(t *testing.T) {
	names := map[string]bool{}
	for _, a := range metricsfx.Alerts {
		names[a.Name] = true
		if f := alerttest.Fixtures[a.Name]; len(f.Fire) == 0 || len(f.Calm) == 0 || f.EvalAt == "" {
			t.Errorf("%s lacks test inputs", a.Name)
		}
	}
	if len(alerttest.Fixtures) != len(metricsfx.Alerts) {
		t.Errorf("%d fixtures for %d alerts: a fixture names no alert", len(alerttest.Fixtures), len(metricsfx.Alerts))
	}
	for _, n := range []string{"StoreConnectionLost", "CacheHitRateCritical", "LockTimeoutRateCritical", "StreamConsumerLagCritical",
		"CacheHitRateLow", "LockContentionHigh", "DLQNotEmpty", "RateLimitRejectionHigh"} {
		if !names[n] {
			t.Errorf("spec alert %s missing", n)
		}
	}
}
