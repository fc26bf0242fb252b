package metricsfx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tool returns the path of a Prometheus tool; CI installs them, so there
// a missing tool fails the test, elsewhere it skips.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (apt-get install prometheus prometheus-alertmanager)", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// The checked-in files are what the generator prints.
func TestCheckedInFilesAreGenerated(t *testing.T) {
	for file, want := range map[string][]byte{
		"rules.yml":        AlertRules(Profile{Prefix: DefaultPrefix}),
		"alertmanager.yml": AlertmanagerConfig(Profile{Prefix: DefaultPrefix}, Receivers{}),
	} {
		got, err := os.ReadFile(filepath.Join("..", "docs", "monitoring", file))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("docs/monitoring/%s is stale: regenerate it with go run ./cmd/redisfx-alerts (see docs/monitoring.md)", file)
		}
	}
}

// The sped-up profile divides every duration, and nothing else.
func TestSpeedupDividesEveryDuration(t *testing.T) {
	rules := string(AlertRules(Profile{Prefix: "payments", Speedup: 60}))
	for _, want := range []string{"rate(payments_lock_timeouts_total[5s])", "last_over_time((max by (namespace, job, stream, group) (payments_stream_consumer_lag))[1m:83ms])",
		"for: 1s", "for: 10s", "keep_firing_for: 2s", `up{job="payments"} == 0`} {
		if !strings.Contains(rules, want) {
			t.Errorf("sped-up rules lack %q", want)
		}
	}
	if strings.Contains(rules, "[5m]") || strings.Contains(rules, "for: 5m") {
		t.Error("a production duration survived the speedup")
	}
	am := string(AlertmanagerConfig(Profile{Speedup: 60}, Receivers{Pager: "http://127.0.0.1:1/pager"}))
	for _, want := range []string{"group_interval: 1s", "group_wait: 166ms", "url: 'http://127.0.0.1:1/pager'"} {
		if !strings.Contains(am, want) {
			t.Errorf("sped-up routing lacks %q:\n%s", want, am)
		}
	}
}

// A job name with brackets was read as a rate window: AlertRules panicked
// ("bad duration eu"), and so did `redisfx-alerts -job 'api[eu]'`.
func TestJobNameWithBracketsAndQuotes(t *testing.T) {
	rules := string(AlertRules(Profile{Prefix: "payments", Job: `api[eu]`, Speedup: 60}))
	for _, want := range []string{`up{job="api[eu]"} == 0`, "rate(payments_lock_timeouts_total[5s])"} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q", want)
		}
	}
	if rules := string(AlertRules(Profile{Prefix: "payments", Job: `a"b\c`})); !strings.Contains(rules, `job=\"a\\\"b\\\\c\"`) && !strings.Contains(rules, `job="a\"b\\c"`) {
		t.Errorf("a quote or backslash in the job is not escaped as a PromQL string:\n%s", rules)
	}
}

// A critical alert that fires and clears between two flushes of its
// Alertmanager group is never sent. Every critical alert therefore keeps
// firing for longer than the pager's group_interval plus one evaluation
// and one send (a minute of margin in production).
func TestEveryCriticalAlertOutlivesThePagerGroupInterval(t *testing.T) {
	for _, a := range Alerts {
		if a.Severity != "critical" {
			if a.KeepFiringFor != "" {
				t.Errorf("%s: keep_firing_for on a %s alert only delays its resolution", a.Name, a.Severity)
			}
			continue
		}
		keep, err := time.ParseDuration(a.KeepFiringFor)
		if err != nil || keep < PagerGroupInterval+time.Minute {
			t.Errorf("%s: keep_firing_for %q, want at least the pager group_interval %v plus a minute", a.Name, a.KeepFiringFor, PagerGroupInterval)
		}
	}
}

// amtool accepts the routing, and each severity reaches its receivers:
// critical pages and reaches the team's chat, warning reaches chat, the
// rest the default receiver.
func TestAmtool_RoutingPerSeverity(t *testing.T) {
	amtool := tool(t, "amtool")
	cfg := filepath.Join(t.TempDir(), "alertmanager.yml")
	_ = os.WriteFile(cfg, AlertmanagerConfig(Profile{}, Receivers{}), 0o644)
	if out, err := exec.Command(amtool, "check-config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config: %v\n%s", err, out)
	}
	for severity, want := range map[string]string{"critical": "pager,chat", "warning": "chat", "info": "default"} {
		out, err := exec.Command(amtool, "config", "routes", "test", "--config.file="+cfg, "severity="+severity).Output() // stdout: stderr has a flag warning
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("severity=%s routes to %q (%v), want %s", severity, strings.TrimSpace(string(out)), err, want)
		}
	}
}

// Metrics that the rules and the dashboard read: each is exported by the
// library today, or belongs to a module not built yet (listed here).
var (
	exportedToday = map[string]string{
		"store_up": "storefx", "commands_total": "tracingfx", "command_duration_seconds": "tracingfx", "errors_total": "tracingfx",
		"idempotency_requests_total": "idempotencyfx", "idempotency_wait_seconds": "idempotencyfx", "idempotency_outbox_oldest_pending_seconds": "idempotencyfx",
		"http_requests_total": "httpfx", "http_request_duration_seconds": "httpfx",
		"lock_timeouts_total": "lockfx", "lock_attempts_total": "lockfx", "lock_wait_seconds": "lockfx",
		"lock_acquisitions_total": "lockfx", "locks_active": "lockfx", "lock_wait_duration_seconds": "lockfx",
		"cache_hits_total": "cachefx", "cache_misses_total": "cachefx", "cache_stampede_prevented_total": "cachefx", "cache_size": "cachefx",
		"ratelimit_rejected_total": "ratelimitfx", "ratelimit_allowed_total": "ratelimitfx", "ratelimit_requests_total": "ratelimitfx",
		"stream_consumer_lag": "streamfx", "stream_length": "streamfx", "tracing_export_errors_total": "tracingfx",
	}
	// notYetBuilt lists metrics that rules or the dashboard read but no
	// module exports yet. Every plugin is built: it is empty.
	notYetBuilt = map[string]string{}
)

func TestRulesAndDashboardReadOnlyKnownMetrics(t *testing.T) {
	known := func(m string) bool {
		m = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
		_, a := exportedToday[m]
		_, b := notYetBuilt[m]
		return a || b
	}
	for _, a := range Alerts {
		for _, m := range a.Metrics {
			if !known(m) {
				t.Errorf("alert %s reads unknown metric %s", a.Name, m)
			}
		}
	}
	dash, err := os.ReadFile(filepath.Join("..", "docs", "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`\$\{prefix\}_([a-z_]+)`)
	found := 0
	for _, m := range re.FindAllStringSubmatch(string(dash), -1) {
		found++
		if !known(m[1]) {
			t.Errorf("dashboard reads unknown metric %s", m[1])
		}
	}
	if found == 0 {
		t.Fatal("no metric found in the dashboard")
	}
}

// Every alert's runbook annotation points at an anchor that exists.
func TestRunbookAnchorsExist(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range Alerts {
		anchor := `<a id="` + strings.ToLower(a.Name) + `"></a>`
		if !strings.Contains(string(doc), anchor) {
			t.Errorf("docs/monitoring.md has no runbook anchor for %s", a.Name)
		}
	}
}

// dashboardPanel is a panel of docs/monitoring/dashboard.json, as far as
// the tests read it.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func dashboardPanels(t *testing.T) []dashboardPanel {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	return dash.Panels
}

// Every dashboard query parses: promtool checks them as recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := tool(t, "promtool")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			n++
			expr := strings.ReplaceAll(tg.Expr, "${prefix}", "payments")
			fmt.Fprintf(&b, "      - record: dashboard:q%d\n        expr: %s\n", n, quoteYAML(expr))
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("a dashboard query does not parse: %v\n%s", err, out)
	}
	if n < 14 {
		t.Fatalf("only %d queries in the dashboard", n)
	}
}

// The dashboard shows what the rules read: its ratios and backlogs are the
// rules' expressions, not look-alikes. Its lock timeout ratio still divided
// by lock_attempts_total after the rules had stopped doing so: three
// acquisitions that all timed out read 0.002 there while
// LockTimeoutRateCritical fired.
func TestDashboardReadsTheRulesExpressions(t *testing.T) {
	dash := func(e string) string { return withPrefix(e, "${prefix}") }
	ruleExprs := map[string]bool{}
	for _, e := range []string{hitRatio, rejectRatio, lockP99, lockTimeoutRatio, redisErrorRatio, serverErrorRatio, storeErrorRatio, lag, dlq} {
		ruleExprs[dash(e)] = true
	}
	// The hit ratio split by layer: the layers' shares add up to the
	// rules' hit ratio.
	_, hitDenominator, _ := strings.Cut(hitRatio, " / ")
	byLayer := dash("sum by (layer) (rate(P_cache_hits_total[5m])) / scalar(" + strings.TrimSuffix(strings.TrimPrefix(hitDenominator, "("), ")") + ")")
	want := map[string][]string{
		"Lock wait p99 and timeout ratio":                                   {lockP99, lockTimeoutRatio},
		"Rate limit: rejected ratio":                                        {rejectRatio},
		"Streams: consumer lag and dead letters":                            {lag, dlq},
		"HTTP 5xx ratio of customer requests (probes and scrapes excluded)": {serverErrorRatio},
		"Cache hit ratio by layer":                                          {},
	}
	for _, p := range dashboardPanels(t) {
		exprs := map[string]bool{}
		for _, tg := range p.Targets {
			exprs[tg.Expr] = true
			ratio := strings.Contains(tg.Expr, " / ")
			backlog := strings.Contains(tg.Expr, "_stream_length") || strings.Contains(tg.Expr, "_stream_consumer_lag")
			if (ratio || backlog) && !ruleExprs[tg.Expr] && tg.Expr != byLayer {
				t.Errorf("panel %q reads %s, which is no rule's expression: a ratio or backlog on the dashboard must be the one the alerts read", p.Title, tg.Expr)
			}
		}
		wanted := want[p.Title]
		for _, e := range wanted {
			if !exprs[dash(e)] {
				t.Errorf("panel %q lacks the rules' %s", p.Title, dash(e))
			}
		}
		delete(want, p.Title)
	}
	for title := range want {
		t.Errorf("the dashboard has no panel %q", title)
	}
}
