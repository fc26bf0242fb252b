package metricsfx

import (
	"fmt"
	"sort"
	"strings"
)

// Alert is one Prometheus alerting rule of the tracing spec, for a given
// metric prefix. Expr holds the placeholder "P_" for the prefix.
type Alert struct {
	Name     string
	Severity string // critical or warning
	Expr     string // with P_ standing for "<prefix>_"
	For      string
	Summary  string
	// Metrics are the metric names (without prefix) the rule reads.
	Metrics []string
	// Fire and Calm are promtool inputs: series that hold the condition
	// just past the threshold, and just short of it.
	Fire, Calm []Series
	// EvalAt is when promtool evaluates (after the rate window and For).
	EvalAt string
	// Labels are the extra labels the firing alert carries.
	Labels map[string]string
}

// Series is a promtool input series; P_ stands for the prefix.
type Series struct{ Name, Values string }

func ratio(num, den string) string {
	return fmt.Sprintf("sum(rate(P_%s[5m])) / %s", num, den)
}

const hitRatio = "sum(rate(P_cache_hits_total[5m])) / (sum(rate(P_cache_hits_total[5m])) + sum(rate(P_cache_misses_total[5m])))"
const rejectRatio = "sum(rate(P_ratelimit_rejected_total[5m])) / (sum(rate(P_ratelimit_allowed_total[5m])) + sum(rate(P_ratelimit_rejected_total[5m])))"
const lockP99 = "histogram_quantile(0.99, sum by (le) (rate(P_lock_wait_seconds_bucket[5m])))"

func counters(pairs ...string) []Series {
	var s []Series
	for i := 0; i+1 < len(pairs); i += 2 {
		s = append(s, Series{pairs[i], "0+" + pairs[i+1] + "x40"})
	}
	return s
}

// lockWait is a lock_wait_seconds histogram where `below` of every 1000
// waits per minute are at most `edge` seconds and the rest just above it.
func lockWait(edge string, below int) []Series {
	buckets := map[string]int{"0.25": 0, "0.5": below, "0.55": 1000, "1": 1000, "2": 1000, "2.2": 1000, "+Inf": 1000}
	if edge == "2" {
		buckets = map[string]int{"0.25": 0, "0.5": 0, "0.55": 0, "1": 0, "2": below, "2.2": 1000, "+Inf": 1000}
	}
	les := make([]string, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Strings(les)
	var s []Series
	for _, le := range les {
		s = append(s, Series{fmt.Sprintf(`P_lock_wait_seconds_bucket{le="%s"}`, le), fmt.Sprintf("0+%dx40", buckets[le])})
	}
	return s
}

// Alerts are the rules of the tracing spec's rule table, plus the levels of
// its threshold table that the rule table lacks. Rate-limit rejection: the
// rule table says 0.2 for the warning, the threshold table 10 % (warning)
// and 30 % (critical); we follow the threshold table (see docs/monitoring.md).
var Alerts = []Alert{
	{Name: "StoreConnectionLost", Severity: "critical", Expr: "P_store_up == 0", For: "1m",
		Summary: "Redis is unreachable from the application", Metrics: []string{"store_up"},
		Fire: []Series{{`P_store_up{client="default"}`, "0x10"}}, Calm: []Series{{`P_store_up{client="default"}`, "1x10"}},
		EvalAt: "5m", Labels: map[string]string{"client": "default"}},
	{Name: "CacheHitRateCritical", Severity: "critical", Expr: hitRatio + " < 0.7", For: "5m",
		Summary: "Cache hit rate below 70%", Metrics: []string{"cache_hits_total", "cache_misses_total"},
		Fire: counters("P_cache_hits_total", "69", "P_cache_misses_total", "31"), Calm: counters("P_cache_hits_total", "71", "P_cache_misses_total", "29"), EvalAt: "20m"},
	{Name: "LockTimeoutRateCritical", Severity: "critical", Expr: ratio("lock_timeouts_total", "sum(rate(P_lock_attempts_total[5m]))") + " > 0.1", For: "5m",
		Summary: "More than 10% of lock attempts time out", Metrics: []string{"lock_timeouts_total", "lock_attempts_total"},
		Fire: counters("P_lock_timeouts_total", "11", "P_lock_attempts_total", "100"), Calm: counters("P_lock_timeouts_total", "9", "P_lock_attempts_total", "100"), EvalAt: "20m"},
	{Name: "StreamConsumerLagCritical", Severity: "critical", Expr: "P_stream_consumer_lag > 10000", For: "5m",
		Summary: "Stream consumers are more than 10000 messages behind", Metrics: []string{"stream_consumer_lag"},
		Fire: []Series{{"P_stream_consumer_lag", "10001x20"}}, Calm: []Series{{"P_stream_consumer_lag", "10000x20"}}, EvalAt: "10m"},
	{Name: "CacheHitRateLow", Severity: "warning", Expr: hitRatio + " < 0.85", For: "10m",
		Summary: "Cache hit rate below 85%", Metrics: []string{"cache_hits_total", "cache_misses_total"},
		Fire: counters("P_cache_hits_total", "84", "P_cache_misses_total", "16"), Calm: counters("P_cache_hits_total", "86", "P_cache_misses_total", "14"), EvalAt: "25m"},
	{Name: "LockContentionHigh", Severity: "warning", Expr: lockP99 + " > 0.5", For: "10m",
		Summary: "Lock wait p99 above 500ms", Metrics: []string{"lock_wait_seconds"},
		Fire: lockWait("0.5", 985), Calm: lockWait("0.5", 995), EvalAt: "25m"},
	{Name: "DLQNotEmpty", Severity: "warning", Expr: `P_stream_length{stream=~".+:dlq"} > 0`, For: "5m",
		Summary: "A dead-letter stream has messages", Metrics: []string{"stream_length"},
		Fire: []Series{{`P_stream_length{stream="orders:dlq"}`, "1x20"}}, Calm: []Series{{`P_stream_length{stream="orders:dlq"}`, "0x20"}, {`P_stream_length{stream="orders"}`, "500x20"}},
		EvalAt: "10m", Labels: map[string]string{"stream": "orders:dlq"}},
	{Name: "RateLimitRejectionHigh", Severity: "warning", Expr: rejectRatio + " > 0.1", For: "10m",
		Summary: "More than 10% of requests are rate limited", Metrics: []string{"ratelimit_rejected_total", "ratelimit_allowed_total"},
		Fire: counters("P_ratelimit_rejected_total", "11", "P_ratelimit_allowed_total", "89"), Calm: counters("P_ratelimit_rejected_total", "9", "P_ratelimit_allowed_total", "91"), EvalAt: "25m"},
	// The threshold table's other levels.
	{Name: "LockTimeoutRateHigh", Severity: "warning", Expr: ratio("lock_timeouts_total", "sum(rate(P_lock_attempts_total[5m]))") + " > 0.05", For: "10m",
		Summary: "More than 5% of lock attempts time out", Metrics: []string{"lock_timeouts_total", "lock_attempts_total"},
		Fire: counters("P_lock_timeouts_total", "6", "P_lock_attempts_total", "100"), Calm: counters("P_lock_timeouts_total", "4", "P_lock_attempts_total", "100"), EvalAt: "25m"},
	{Name: "LockContentionCritical", Severity: "critical", Expr: lockP99 + " > 2", For: "5m",
		Summary: "Lock wait p99 above 2s", Metrics: []string{"lock_wait_seconds"},
		Fire: lockWait("2", 985), Calm: lockWait("2", 995), EvalAt: "20m"},
	{Name: "StreamConsumerLagHigh", Severity: "warning", Expr: "P_stream_consumer_lag > 1000", For: "10m",
		Summary: "Stream consumers are more than 1000 messages behind", Metrics: []string{"stream_consumer_lag"},
		Fire: []Series{{"P_stream_consumer_lag", "1001x30"}}, Calm: []Series{{"P_stream_consumer_lag", "1000x30"}}, EvalAt: "15m"},
	{Name: "DLQSizeCritical", Severity: "critical", Expr: `P_stream_length{stream=~".+:dlq"} > 100`, For: "5m",
		Summary: "A dead-letter stream holds more than 100 messages", Metrics: []string{"stream_length"},
		Fire: []Series{{`P_stream_length{stream="orders:dlq"}`, "101x20"}}, Calm: []Series{{`P_stream_length{stream="orders:dlq"}`, "100x20"}},
		EvalAt: "10m", Labels: map[string]string{"stream": "orders:dlq"}},
	{Name: "RateLimitRejectionCritical", Severity: "critical", Expr: rejectRatio + " > 0.3", For: "5m",
		Summary: "More than 30% of requests are rate limited", Metrics: []string{"ratelimit_rejected_total", "ratelimit_allowed_total"},
		Fire: counters("P_ratelimit_rejected_total", "31", "P_ratelimit_allowed_total", "69"), Calm: counters("P_ratelimit_rejected_total", "29", "P_ratelimit_allowed_total", "71"), EvalAt: "20m"},
}

func withPrefix(s, prefix string) string { return strings.ReplaceAll(s, "P_", prefix+"_") }

// AlertRules renders the Prometheus rule file for a metric prefix.
func AlertRules(prefix string) []byte {
	var b strings.Builder
	b.WriteString("# Generated by: go run ./cmd/redisfx-alerts -prefix " + prefix + "\n")
	b.WriteString("groups:\n  - name: redisfx\n    rules:\n")
	for _, a := range Alerts {
		fmt.Fprintf(&b, "      - alert: %s\n        expr: %s\n        for: %s\n        labels:\n          severity: %s\n",
			a.Name, quoteYAML(withPrefix(a.Expr, prefix)), a.For, a.Severity)
		fmt.Fprintf(&b, "        annotations:\n          summary: %s\n          runbook: %s\n",
			quoteYAML(a.Summary), quoteYAML("docs/monitoring.md#"+strings.ToLower(a.Name)))
	}
	return []byte(b.String())
}

// AlertRuleTests renders a promtool test file for rules.yml of the same
// prefix: for every alert, it fires after its For when the condition holds
// just past the threshold, and stays silent just short of it.
func AlertRuleTests(prefix, rulesFile string) []byte {
	var b strings.Builder
	b.WriteString("# Generated by: go run ./cmd/redisfx-alerts -prefix " + prefix + " -tests\n")
	fmt.Fprintf(&b, "rule_files:\n  - %s\nevaluation_interval: 1m\ntests:\n", rulesFile)
	for _, a := range Alerts {
		for _, fire := range []bool{true, false} {
			in := a.Calm
			if fire {
				in = a.Fire
			}
			b.WriteString("  - interval: 1m\n    input_series:\n")
			for _, s := range in {
				fmt.Fprintf(&b, "      - series: %s\n        values: %s\n", quoteYAML(withPrefix(s.Name, prefix)), quoteYAML(s.Values))
			}
			fmt.Fprintf(&b, "    alert_rule_test:\n      - eval_time: %s\n        alertname: %s\n", a.EvalAt, a.Name)
			if !fire {
				b.WriteString("        exp_alerts: []\n")
				continue
			}
			b.WriteString("        exp_alerts:\n          - exp_labels:\n")
			fmt.Fprintf(&b, "              severity: %s\n", a.Severity)
			keys := make([]string, 0, len(a.Labels))
			for k := range a.Labels {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, "              %s: %s\n", k, quoteYAML(a.Labels[k]))
			}
			fmt.Fprintf(&b, "            exp_annotations:\n              summary: %s\n              runbook: %s\n",
				quoteYAML(a.Summary), quoteYAML("docs/monitoring.md#"+strings.ToLower(a.Name)))
		}
	}
	return []byte(b.String())
}

// AlertmanagerConfig is the routing of the spec: critical alerts to a
// paging receiver (and matching continues), warnings to a chat receiver,
// everything else to a default receiver. Receivers hold placeholders.
func AlertmanagerConfig() []byte {
	return []byte(`# Routing of the redisfx alerts (tracing spec): replace the receivers' endpoints.
route:
  receiver: default
  group_by: [alertname]
  routes:
    - matchers: ['severity="critical"']
      receiver: pager
      continue: true
    - matchers: ['severity="warning"']
      receiver: chat
receivers:
  - name: default
  - name: pager
    webhook_configs:
      - url: http://pager.invalid/<API_KEY>
  - name: chat
    webhook_configs:
      - url: http://chat.invalid/<ACCESS_TOKEN>
`)
}

func quoteYAML(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
