// Package alerttest holds the promtool scenarios of metricsfx.Alerts and
// renders them as a promtool unit-test file (redisfx-alerts -tests).
package alerttest

import (
	"fmt"
	"sort"
	"strings"

	"github.com/redisfx/redisfx/metricsfx"
)

// Fixture is the promtool scenarios of one alert.
type Fixture struct {
	// Fire and Calm hold the condition just past the threshold, and just
	// short of it; promtool evaluates them at EvalAt (after the rate window
	// and For).
	Fire, Calm []Series
	EvalAt     string
	// Labels are the extra labels the firing alert carries.
	Labels map[string]string
	// Cases are further scenarios: restarts, failed scrapes, traffic that
	// is not the customers'.
	Cases []Case
}

// Series is a promtool input series; P_ stands for the prefix.
type Series struct{ Name, Values string }

// Case is a promtool scenario besides Fire and Calm: input series, and at
// each evaluation time whether the alert fires.
type Case struct {
	Why   string // a comment above the test
	In    []Series
	Evals []Eval
	// Labels are the firing alert's labels (besides severity); nil: the
	// alert's Labels.
	Labels map[string]string
	// Interval is the input series' sample interval; "" is 1m.
	Interval string
}

// Eval is one evaluation of a Case: at At, the alert fires or not.
type Eval struct {
	At   string
	Fire bool
}

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

// The backlog rules' scenarios: a stream's series, of one scrape target
// (its labels before the stream's), and the firing alert's labels.
const (
	lagSeries = `P_stream_consumer_lag{%s,stream="orders",group="receipts"}`
	dlqSeries = `P_stream_length{%s,stream="orders:dlq"}`
)

var (
	lagLabels = map[string]string{"job": "$job", "stream": "orders", "group": "receipts"}
	dlqLabels = map[string]string{"job": "$job", "stream": "orders:dlq"}
)

// backlogCases are the ways a backlog gauge's series come and go, for a
// rule that reads it through held: series is a format taking the target's
// labels, bad a reading past the threshold. Every firing alert is one per
// stream (and group), never one per instance.
func backlogCases(series string, labels map[string]string, bad string) []Case {
	pod := func(n int) string {
		return fmt.Sprintf(`job="$job",instance="app-%d:8080"`, n)
	}
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range labels {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	return []Case{
		{Why: "Rolling restart: app-1 is replaced by app-2 at 20m; the operator clears the backlog at 25m, and app-2 reads 0 from then on: the live 0 resolves the alert, app-1's last reading does not hold it (namespace is kept, pod is not).",
			In: []Series{
				{fmt.Sprintf(series, `namespace="prod",pod="app-1",`+pod(1)), bad + "x20"},
				{fmt.Sprintf(series, `namespace="prod",pod="app-2",`+pod(2)), "_x20 " + bad + "x4 0x60"},
			},
			Evals:  []Eval{{"22m", true}, {"35m", false}, {"75m", false}},
			Labels: with(map[string]string{"namespace": "prod"})},
		{Why: "Failed scrape: no instance reports the backlog any more (Prometheus cannot reach them): the last reading holds the alert for an hour.",
			In:    []Series{{fmt.Sprintf(series, pod(1)), bad + "x20"}, {fmt.Sprintf(series, pod(2)), bad + "x20"}},
			Evals: []Eval{{"15m", true}, {"50m", true}}, Labels: labels},
		{Why: "Failed scrape 45 s after the backlog was cleared, scraped every 15 s: the 0 read between two minute marks holds, not the reading of the minute mark before it.",
			Interval: "15s", In: []Series{{fmt.Sprintf(series, pod(1)), bad + "x40 0 0 0 stale"}},
			Evals: []Eval{{"15m", false}, {"30m", false}}},
		{Why: "Failed scrape after the backlog was cleared: the freshest reading (app-2's 0) holds, not the last reading of app-1, replaced before.",
			In:    []Series{{fmt.Sprintf(series, pod(1)), bad + "x20"}, {fmt.Sprintf(series, pod(2)), "_x20 " + bad + "x4 0x5"}},
			Evals: []Eval{{"50m", false}}},
		{Why: "Scale-down: app-2 and app-3 go away at 20m, app-1 still reads the backlog until it is cleared at 41m.",
			In: []Series{
				{fmt.Sprintf(series, pod(1)), bad + "x40 0x20"},
				{fmt.Sprintf(series, pod(2)), bad + "x20"},
				{fmt.Sprintf(series, pod(3)), bad + "x20"},
			},
			Evals: []Eval{{"30m", true}, {"50m", false}}, Labels: labels},
	}
}

// probeCases are the server-error rules' scenarios with the requests
// machines send (scrapes of /metrics, kubelet's /healthz and /readyz),
// evaluated at at.
func probeCases(at string) []Case {
	req := func(route, code string) string {
		return fmt.Sprintf(`P_http_requests_total{method="GET",route="%s",code="%s"}`, route, code)
	}
	probes := func(readyz string) []Series {
		return []Series{{req("/metrics", "200"), "0+4x40"}, {req("/healthz", "200"), "0+6x40"}, {req("/readyz", readyz), "0+6x40"}}
	}
	payments := func(code, perMinute string) Series {
		return Series{fmt.Sprintf(`P_http_requests_total{method="POST",route="/payments",code="%s"}`, code), "0+" + perMinute + "x40"}
	}
	return []Case{
		{Why: "A quiet service in an outage: every payment fails (1 a minute) among 4 scrapes and 12 probes a minute, 5 failing payments among 80 other requests in 5 minutes: the customers' ratio is 100 %.",
			In: append(probes("200"), payments("502", "1")), Evals: []Eval{{at, true}}},
		{Why: "Redis is down: /readyz answers 503 (6 a minute), which no customer sees; the payments succeed.",
			In: append(probes("503"), payments("201", "10")), Evals: []Eval{{at, false}}},
		{Why: "No customer traffic at all, /readyz failing: no customer saw an error.",
			In: probes("503"), Evals: []Eval{{at, false}}},
	}
}

// target is one scrape target of the job, as promtool inputs label it.
const target = `{job="$job",instance="app:8080"}`

// Fixtures are the scenarios of every alert of metricsfx.Alerts, by name.
var Fixtures = map[string]Fixture{
	"StoreConnectionLost":        {Fire: []Series{{`P_store_up{client="default"}`, "0x10"}}, Calm: []Series{{`P_store_up{client="default"}`, "1x10"}}, EvalAt: "5m", Labels: map[string]string{"client": "default"}},
	"CacheHitRateCritical":       {Fire: counters("P_cache_hits_total", "69", "P_cache_misses_total", "31"), Calm: counters("P_cache_hits_total", "71", "P_cache_misses_total", "29"), EvalAt: "20m"},
	"LockTimeoutRateCritical":    {Fire: counters("P_lock_timeouts_total", "11", "P_lock_acquisitions_total", "89"), Calm: counters("P_lock_timeouts_total", "9", "P_lock_acquisitions_total", "91"), EvalAt: "20m"},
	"StreamConsumerLagCritical":  {Fire: []Series{{"P_stream_consumer_lag", "10001x20"}}, Calm: []Series{{"P_stream_consumer_lag", "10000x20"}}, EvalAt: "10m", Cases: backlogCases(lagSeries, lagLabels, "10001")},
	"CacheHitRateLow":            {Fire: counters("P_cache_hits_total", "84", "P_cache_misses_total", "16"), Calm: counters("P_cache_hits_total", "86", "P_cache_misses_total", "14"), EvalAt: "25m"},
	"LockContentionHigh":         {Fire: lockWait("0.5", 985), Calm: lockWait("0.5", 995), EvalAt: "25m"},
	"DLQNotEmpty":                {Fire: []Series{{`P_stream_length{stream="orders:dlq"}`, "1x20"}}, Calm: []Series{{`P_stream_length{stream="orders:dlq"}`, "0x20"}, {`P_stream_length{stream="orders"}`, "500x20"}}, EvalAt: "10m", Labels: map[string]string{"stream": "orders:dlq"}, Cases: backlogCases(dlqSeries, dlqLabels, "1")},
	"RateLimitRejectionHigh":     {Fire: counters("P_ratelimit_rejected_total", "11", "P_ratelimit_allowed_total", "89"), Calm: counters("P_ratelimit_rejected_total", "9", "P_ratelimit_allowed_total", "91"), EvalAt: "25m"},
	"LockTimeoutRateHigh":        {Fire: counters("P_lock_timeouts_total", "6", "P_lock_acquisitions_total", "94"), Calm: counters("P_lock_timeouts_total", "4", "P_lock_acquisitions_total", "96"), EvalAt: "25m"},
	"LockContentionCritical":     {Fire: lockWait("2", 985), Calm: lockWait("2", 995), EvalAt: "20m"},
	"StreamConsumerLagHigh":      {Fire: []Series{{"P_stream_consumer_lag", "1001x30"}}, Calm: []Series{{"P_stream_consumer_lag", "1000x30"}}, EvalAt: "15m", Cases: backlogCases(lagSeries, lagLabels, "1001")},
	"DLQSizeCritical":            {Fire: []Series{{`P_stream_length{stream="orders:dlq"}`, "101x20"}}, Calm: []Series{{`P_stream_length{stream="orders:dlq"}`, "100x20"}}, EvalAt: "10m", Labels: map[string]string{"stream": "orders:dlq"}, Cases: backlogCases(dlqSeries, dlqLabels, "101")},
	"RateLimitRejectionCritical": {Fire: counters("P_ratelimit_rejected_total", "31", "P_ratelimit_allowed_total", "69"), Calm: counters("P_ratelimit_rejected_total", "29", "P_ratelimit_allowed_total", "71"), EvalAt: "20m"},
	"TargetDown":                 {Fire: []Series{{"up" + target, "0x10"}}, Calm: []Series{{"up" + target, "1x10"}}, EvalAt: "5m", Labels: map[string]string{"job": "$job", "instance": "app:8080"}},
	"TargetMissing":              {Fire: []Series{{`up{job="other",instance="x:1"}`, "1x10"}}, Calm: []Series{{"up" + target, "1x10"}}, EvalAt: "8m", Labels: map[string]string{"job": "$job"}},
	"StoreUpMissing":             {Fire: []Series{{"up" + target, "1x10"}}, Calm: []Series{{"up" + target, "1x10"}, {`P_store_up{job="$job",instance="app:8080",client="default"}`, "1x10"}}, EvalAt: "8m", Labels: map[string]string{"job": "$job", "instance": "app:8080"}},
	"RedisErrorRateHigh":         {Fire: counters("P_errors_total", "2", `P_commands_total{command="GET"}`, "100"), Calm: counters("P_errors_total", "1", `P_commands_total{command="GET"}`, "200"), EvalAt: "20m"},
	"IdempotencyStoreErrors":     {Fire: counters(`P_idempotency_requests_total{outcome="store_error"}`, "1", `P_idempotency_requests_total{outcome="new"}`, "1000"), Calm: counters(`P_idempotency_requests_total{outcome="store_error"}`, "0", `P_idempotency_requests_total{outcome="new"}`, "1000"), EvalAt: "20m"},
	"IdempotencyStoreErrorsCritical": {Fire: counters(`P_idempotency_requests_total{outcome="store_error"}`, "2", `P_idempotency_requests_total{outcome="new"}`, "98"), Calm: counters(`P_idempotency_requests_total{outcome="store_error"}`, "1", `P_idempotency_requests_total{outcome="new"}`, "199"), EvalAt: "20m", Cases: []Case{{Why: "3 of 200 requests refused while every claim misses ReplicaAcks (counted unreplicated_claim beside new): 1.5 % of the requests, not 3 of 397",
		In: counters(`P_idempotency_requests_total{outcome="store_error"}`, "3", `P_idempotency_requests_total{outcome="new"}`, "197",
			`P_idempotency_requests_total{outcome="unreplicated_claim"}`, "197", `P_idempotency_requests_total{outcome="pending_completion"}`, "5"),
		Evals: []Eval{{At: "20m", Fire: true}}}}},
	"IdempotencyFailOpen":         {Fire: counters(`P_idempotency_requests_total{outcome="fail_open"}`, "1", `P_idempotency_requests_total{outcome="new"}`, "1000"), Calm: counters(`P_idempotency_requests_total{outcome="fail_open"}`, "0", `P_idempotency_requests_total{outcome="new"}`, "1000"), EvalAt: "20m"},
	"IdempotencyOutcomeLost":      {Fire: counters(`P_idempotency_requests_total{outcome="lost_completion"}`, "1", `P_idempotency_requests_total{outcome="new"}`, "1000"), Calm: counters(`P_idempotency_requests_total{outcome="lost_completion"}`, "0", `P_idempotency_requests_total{outcome="new"}`, "1000"), EvalAt: "20m"},
	"IdempotencyOutboxStalled":    {Fire: []Series{{"P_idempotency_outbox_oldest_pending_seconds", "0 301+60x20"}}, Calm: []Series{{"P_idempotency_outbox_oldest_pending_seconds", "300x20"}}, EvalAt: "10m"},
	"HTTPServerErrorRateHigh":     {Fire: counters(`P_http_requests_total{code="500"}`, "6", `P_http_requests_total{code="201"}`, "94"), Calm: counters(`P_http_requests_total{code="500"}`, "4", `P_http_requests_total{code="201"}`, "96"), EvalAt: "20m", Cases: probeCases("20m")},
	"HTTPServerErrorRateCritical": {Fire: counters(`P_http_requests_total{code="503"}`, "21", `P_http_requests_total{code="201"}`, "79"), Calm: counters(`P_http_requests_total{code="503"}`, "19", `P_http_requests_total{code="201"}`, "81"), EvalAt: "20m", Cases: probeCases("20m")},
	"TraceExportFailing":          {Fire: []Series{{"P_tracing_export_errors_total", "0+1x40"}}, Calm: []Series{{"P_tracing_export_errors_total", "0x10 1x30"}}, EvalAt: "30m"},
}

// Tests renders a promtool test file for the production rules of p's prefix
// and job (rulesFile): for every alert, it fires after its For when the
// condition holds just past the threshold, stays silent just short of it,
// and reads its Cases right.
func Tests(p metricsfx.Profile, rulesFile string) []byte {
	p.Speedup = 1
	var b strings.Builder
	cmd := "go run ./cmd/redisfx-alerts -prefix " + p.Prefix
	if p.Job != "" && p.Job != p.Prefix {
		cmd += " -job " + p.Job
	}
	fmt.Fprintf(&b, "# Generated by: %s -tests\n", cmd)
	fmt.Fprintf(&b, "rule_files:\n  - %s\nevaluation_interval: 1m\ntests:\n", rulesFile)
	for _, a := range metricsfx.Alerts {
		f := Fixtures[a.Name]
		cases := append([]Case{
			{In: f.Fire, Evals: []Eval{{f.EvalAt, true}}},
			{In: f.Calm, Evals: []Eval{{f.EvalAt, false}}},
		}, f.Cases...)
		for _, c := range cases {
			if c.Why != "" {
				fmt.Fprintf(&b, "  # %s: %s\n", a.Name, c.Why)
			}
			interval := c.Interval
			if interval == "" {
				interval = "1m"
			}
			fmt.Fprintf(&b, "  - interval: %s\n    input_series:\n", interval)
			for _, s := range c.In {
				fmt.Fprintf(&b, "      - series: %s\n        values: %s\n", quoteYAML(p.Expr(s.Name)), quoteYAML(s.Values))
			}
			b.WriteString("    alert_rule_test:\n")
			labels := f.Labels
			if c.Labels != nil {
				labels = c.Labels
			}
			for _, e := range c.Evals {
				writeEval(&b, p, a, e, labels)
			}
		}
	}
	return []byte(b.String())
}

// writeEval writes one alert_rule_test entry: a fires at e.At with labels,
// or does not fire.
func writeEval(b *strings.Builder, p metricsfx.Profile, a metricsfx.Alert, e Eval, labels map[string]string) {
	fmt.Fprintf(b, "      - eval_time: %s\n        alertname: %s\n", e.At, a.Name)
	if !e.Fire {
		b.WriteString("        exp_alerts: []\n")
		return
	}
	b.WriteString("        exp_alerts:\n          - exp_labels:\n")
	fmt.Fprintf(b, "              severity: %s\n", a.Severity)
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "              %s: %s\n", k, quoteYAML(p.Expr(labels[k])))
	}
	fmt.Fprintf(b, "            exp_annotations:\n              summary: %s\n              runbook: %s\n",
		quoteYAML(a.Summary), quoteYAML("docs/monitoring.md#"+strings.ToLower(a.Name)))
}

func quoteYAML(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
