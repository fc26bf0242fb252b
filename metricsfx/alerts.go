package metricsfx

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Alert is one alerting rule. Expr holds placeholders ("P_" for "<prefix>_",
// "$job" for the scrape job); durations are production values, divided by
// Profile.Speedup when rendered.
type Alert struct {
	Name     string
	Severity string // critical or warning
	Expr     string
	For      string
	// KeepFiringFor makes even a short episode outlive the pager route's
	// group_interval, so that it is sent.
	KeepFiringFor string
	Summary       string
	// Metrics are the metric names (without prefix) the rule reads.
	Metrics []string
}

// Routing timings in production. Every critical alert's KeepFiringFor
// exceeds PagerGroupInterval by an evaluation and a send: an alert that fires
// and clears between two flushes of its group is never sent.
const (
	PagerGroupWait      = 10 * time.Second
	PagerGroupInterval  = time.Minute
	PagerRepeatInterval = time.Hour
	ChatGroupWait       = 30 * time.Second
	ChatGroupInterval   = 5 * time.Minute
	ChatRepeatInterval  = 4 * time.Hour
	// keepFiring is every critical alert's KeepFiringFor.
	keepFiring = "2m"
)

const (
	hitRatio    = "sum(rate(P_cache_hits_total[5m])) / (sum(rate(P_cache_hits_total[5m])) + sum(rate(P_cache_misses_total[5m])))"
	rejectRatio = "sum(rate(P_ratelimit_rejected_total[5m])) / (sum(rate(P_ratelimit_allowed_total[5m])) + sum(rate(P_ratelimit_rejected_total[5m])))"
	lockP99     = "histogram_quantile(0.99, sum by (le) (rate(P_lock_wait_seconds_bucket[5m])))"
	// The share of ended acquisitions that gave up (lock_attempts_total
	// counts retries: no denominator).
	lockTimeoutRatio = "sum(rate(P_lock_timeouts_total[5m])) / (sum(rate(P_lock_acquisitions_total[5m])) + sum(rate(P_lock_timeouts_total[5m])))"
	redisErrorRatio  = "sum(rate(P_errors_total[5m])) / sum(rate(P_commands_total[5m]))"
	// httpfx's probe routes: machines', not customers', left out of the
	// server-error ratio (they outnumber a quiet service's requests, and
	// /readyz answers 503 while Redis is down).
	probeRoutes      = "/metrics|/healthz|/readyz"
	serverErrorRatio = `sum(rate(P_http_requests_total{code=~"5..",route!~"` + probeRoutes + `"}[5m])) / sum(rate(P_http_requests_total{route!~"` + probeRoutes + `"}[5m]))`
	// Idempotency outcomes counted beside a request's own: not in the
	// store-error ratio's denominator.
	besideOutcomes  = "unreplicated_claim|unreplicated_completion|pending_completion|late_completion|lost_completion|stale_owner"
	storeErrorRatio = `sum(rate(P_idempotency_requests_total{outcome="store_error"}[5m])) / sum(rate(P_idempotency_requests_total{outcome!~"` + besideOutcomes + `"}[5m]))`
)

// The backlog gauges, read through held.
var (
	lag = held("P_stream_consumer_lag", "namespace, job, stream, group")
	dlq = held(`P_stream_length{stream=~".+:dlq"}`, "namespace, job, stream")
)

// held reads a backlog gauge per backlog (by; never per instance): the
// largest live reading, else the last one of the past hour, so that a failed
// scrape does not resolve the alert while a replaced instance's last
// reading does not hold it. heldStep must not exceed the scrape interval,
// or a fresher reading is missed.
func held(selector, by string) string {
	live := "max by (" + by + ") (" + selector + ")"
	return "(" + live + " or last_over_time((" + live + ")[1h:" + heldStep + "]))"
}

const heldStep = "5s"

// Alerts are the rules; docs/monitoring.md says why each level is what it is.
var Alerts = []Alert{
	{Name: "StoreConnectionLost", Severity: "critical", Expr: "P_store_up == 0", For: "1m", KeepFiringFor: keepFiring, Summary: "Redis is unreachable from the application", Metrics: []string{"store_up"}},
	{Name: "CacheHitRateCritical", Severity: "critical", Expr: hitRatio + " < 0.7", For: "5m", KeepFiringFor: keepFiring, Summary: "Cache hit rate below 70%", Metrics: []string{"cache_hits_total", "cache_misses_total"}},
	{Name: "LockTimeoutRateCritical", Severity: "critical", Expr: lockTimeoutRatio + " > 0.1", For: "5m", KeepFiringFor: keepFiring, Summary: "More than 10% of lock acquisitions time out", Metrics: []string{"lock_timeouts_total", "lock_acquisitions_total"}},
	{Name: "StreamConsumerLagCritical", Severity: "critical", Expr: lag + " > 10000", For: "5m", KeepFiringFor: keepFiring, Summary: "Stream consumers are more than 10000 messages behind", Metrics: []string{"stream_consumer_lag"}},
	{Name: "CacheHitRateLow", Severity: "warning", Expr: hitRatio + " < 0.85", For: "10m", Summary: "Cache hit rate below 85%", Metrics: []string{"cache_hits_total", "cache_misses_total"}},
	{Name: "LockContentionHigh", Severity: "warning", Expr: lockP99 + " > 0.5", For: "10m", Summary: "Lock wait p99 above 500ms", Metrics: []string{"lock_wait_seconds"}},
	{Name: "DLQNotEmpty", Severity: "warning", Expr: dlq + " > 0", For: "5m", Summary: "A dead-letter stream has messages", Metrics: []string{"stream_length"}},
	{Name: "RateLimitRejectionHigh", Severity: "warning", Expr: rejectRatio + " > 0.1", For: "10m", Summary: "More than 10% of requests are rate limited", Metrics: []string{"ratelimit_rejected_total", "ratelimit_allowed_total"}},
	{Name: "LockTimeoutRateHigh", Severity: "warning", Expr: lockTimeoutRatio + " > 0.05", For: "10m", Summary: "More than 5% of lock acquisitions time out", Metrics: []string{"lock_timeouts_total", "lock_acquisitions_total"}},
	{Name: "LockContentionCritical", Severity: "critical", Expr: lockP99 + " > 2", For: "5m", KeepFiringFor: keepFiring, Summary: "Lock wait p99 above 2s", Metrics: []string{"lock_wait_seconds"}},
	{Name: "StreamConsumerLagHigh", Severity: "warning", Expr: lag + " > 1000", For: "10m", Summary: "Stream consumers are more than 1000 messages behind", Metrics: []string{"stream_consumer_lag"}},
	{Name: "DLQSizeCritical", Severity: "critical", Expr: dlq + " > 100", For: "5m", KeepFiringFor: keepFiring, Summary: "A dead-letter stream holds more than 100 messages", Metrics: []string{"stream_length"}},
	{Name: "RateLimitRejectionCritical", Severity: "critical", Expr: rejectRatio + " > 0.3", For: "5m", KeepFiringFor: keepFiring, Summary: "More than 30% of requests are rate limited", Metrics: []string{"ratelimit_rejected_total", "ratelimit_allowed_total"}},
	{Name: "TargetDown", Severity: "critical", Expr: `up{job="$job"} == 0`, For: "1m", KeepFiringFor: keepFiring, Summary: "Prometheus cannot scrape the application (process down, or /metrics failing)", Metrics: []string{}},
	{Name: "TargetMissing", Severity: "critical", Expr: `absent(up{job="$job"})`, For: "5m", KeepFiringFor: keepFiring, Summary: "Prometheus has no target for the application's job: nothing about it is monitored", Metrics: []string{}},
	{Name: "StoreUpMissing", Severity: "warning", Expr: `up{job="$job"} == 1 unless on (job, instance) P_store_up`, For: "5m", Summary: "The application answers scrapes but exports no store_up: StoreConnectionLost cannot fire (wrong metric prefix, or storefx missing)", Metrics: []string{"store_up"}},
	{Name: "RedisErrorRateHigh", Severity: "warning", Expr: redisErrorRatio + " > 0.01", For: "5m", Summary: "More than 1% of Redis commands fail", Metrics: []string{"errors_total", "commands_total"}},
	{Name: "IdempotencyStoreErrors", Severity: "warning", Expr: `sum(increase(P_idempotency_requests_total{outcome="store_error"}[5m])) > 0`, For: "1m", Summary: "Idempotent requests were refused because Redis failed (fail-closed: the client got 500)", Metrics: []string{"idempotency_requests_total"}},
	{Name: "IdempotencyStoreErrorsCritical", Severity: "critical", Expr: storeErrorRatio + " > 0.01", For: "2m", KeepFiringFor: keepFiring, Summary: "More than 1% of idempotent requests fail because Redis fails", Metrics: []string{"idempotency_requests_total"}},
	{Name: "IdempotencyFailOpen", Severity: "critical", Expr: `sum(increase(P_idempotency_requests_total{outcome="fail_open"}[5m])) > 0`, For: "0s", KeepFiringFor: keepFiring, Summary: "Handlers ran without duplicate protection (fail-open with Redis failing): a retried payment may be charged twice", Metrics: []string{"idempotency_requests_total"}},
	{Name: "IdempotencyOutcomeLost", Severity: "critical", Expr: `sum(increase(P_idempotency_requests_total{outcome="lost_completion"}[5m])) > 0`, For: "0s", KeepFiringFor: keepFiring, Summary: "A handler ran but recording its outcome was never confirmed: a retry of that key may run the handler again", Metrics: []string{"idempotency_requests_total"}},
	{Name: "IdempotencyOutboxStalled", Severity: "critical", Expr: "max(P_idempotency_outbox_oldest_pending_seconds) > 300", For: "2m", KeepFiringFor: keepFiring, Summary: "Events committed with recorded outcomes have waited more than 5 minutes for delivery to their streams (receipts, ledgers and fraud checks do not hear of them)", Metrics: []string{"idempotency_outbox_oldest_pending_seconds"}},
	{Name: "HTTPServerErrorRateHigh", Severity: "warning", Expr: serverErrorRatio + " > 0.05", For: "5m", Summary: "More than 5% of customer requests answer 5xx (probes and scrapes not counted)", Metrics: []string{"http_requests_total"}},
	{Name: "HTTPServerErrorRateCritical", Severity: "critical", Expr: serverErrorRatio + " > 0.2", For: "2m", KeepFiringFor: keepFiring, Summary: "More than 20% of customer requests answer 5xx (probes and scrapes not counted)", Metrics: []string{"http_requests_total"}},
	{Name: "TraceExportFailing", Severity: "warning", Expr: "sum(rate(P_tracing_export_errors_total[5m])) > 0", For: "15m", Summary: "Spans have failed to reach the trace backend for 15 minutes (traces are being lost)", Metrics: []string{"tracing_export_errors_total"}},
}

// Profile is how the rules and the routing are rendered.
type Profile struct {
	// Prefix is the application's metric prefix (metricsfx.Config.Prefix).
	Prefix string
	// Job is the Prometheus scrape job of the application, which the
	// TargetDown and TargetMissing rules select. Default: Prefix.
	Job string
	// Speedup divides every duration, the Alertmanager timings too; 0 or 1
	// is production.
	Speedup int
}

func (p Profile) speedup() int64 { return int64(max(p.Speedup, 1)) }

// scale divides a duration written as Prometheus does ("5m", "1h", "0s").
func (p Profile) scale(d string) string {
	v, err := model.ParseDuration(d)
	if err != nil {
		panic("metricsfx: bad duration " + d)
	}
	return p.duration(time.Duration(v))
}

// duration is d divided by the speedup, written as Prometheus and
// Alertmanager read durations.
func (p Profile) duration(d time.Duration) string {
	return model.Duration(d / time.Duration(p.speedup())).String()
}

// Expr renders an expression or series for the profile: prefix, windows,
// then the job (last, so that "api[eu]" is not read as a window), escaped
// as a PromQL string.
func (p Profile) Expr(e string) string {
	e = window.ReplaceAllStringFunc(withPrefix(e, p.Prefix), func(w string) string {
		if rng, step, sub := strings.Cut(w[1:len(w)-1], ":"); sub { // a subquery, [range:step]
			return "[" + p.scale(rng) + ":" + p.scale(step) + "]"
		}
		return "[" + p.scale(w[1:len(w)-1]) + "]"
	})
	return strings.ReplaceAll(e, "$job", promString.Replace(cmp.Or(p.Job, p.Prefix)))
}

// window is a range or subquery window, [5m] or [1h:5s].
var window = regexp.MustCompile(`\[[^\]]*\]`)

// promString escapes the inside of a double-quoted PromQL string.
var promString = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func withPrefix(s, prefix string) string { return strings.ReplaceAll(s, "P_", prefix+"_") }

func (p Profile) header(flags string) string {
	cmd := "go run ./cmd/redisfx-alerts -prefix " + p.Prefix
	if p.Job != "" && p.Job != p.Prefix {
		cmd += " -job " + p.Job
	}
	if p.speedup() > 1 {
		cmd += fmt.Sprintf(" -speedup %d", p.speedup())
	}
	return "# Generated by: " + cmd + flags + "\n"
}

// AlertRules renders the Prometheus rule file.
func AlertRules(p Profile) []byte {
	var b strings.Builder
	b.WriteString(p.header(""))
	b.WriteString("groups:\n  - name: redisfx\n    rules:\n")
	for _, a := range Alerts {
		fmt.Fprintf(&b, "      - alert: %s\n        expr: %s\n        for: %s\n", a.Name, quoteYAML(p.Expr(a.Expr)), p.scale(a.For))
		if a.KeepFiringFor != "" {
			fmt.Fprintf(&b, "        keep_firing_for: %s\n", p.scale(a.KeepFiringFor))
		}
		fmt.Fprintf(&b, "        labels:\n          severity: %s\n", a.Severity)
		fmt.Fprintf(&b, "        annotations:\n          summary: %s\n          runbook: %s\n",
			quoteYAML(a.Summary), quoteYAML("docs/monitoring.md#"+strings.ToLower(a.Name)))
	}
	return []byte(b.String())
}

// Receivers are the webhook URLs of the three receivers; an empty URL
// renders a placeholder (pager, chat) or no webhook (default).
type Receivers struct{ Pager, Chat, Default string }

// AlertmanagerConfig is the routing: critical alerts page (pager receiver)
// and continue to the team's chat, warnings go to chat, everything else to
// the default receiver. Timings are the production ones divided by
// p.Speedup (see docs/monitoring.md for why each is what it is).
func AlertmanagerConfig(p Profile, r Receivers) []byte {
	d := p.duration
	r.Pager = cmp.Or(r.Pager, "http://pager.invalid/<API_KEY>")
	r.Chat = cmp.Or(r.Chat, "http://chat.invalid/<ACCESS_TOKEN>")
	var b strings.Builder
	b.WriteString(p.header(" -alertmanager"))
	b.WriteString("# Routing of the redisfx alerts: replace the receivers' endpoints.\n")
	fmt.Fprintf(&b, routing, d(ChatGroupWait), d(ChatGroupInterval), d(ChatRepeatInterval),
		d(PagerGroupWait), d(PagerGroupInterval), d(PagerRepeatInterval),
		d(ChatGroupWait), d(ChatGroupInterval), d(ChatRepeatInterval))
	if r.Default != "" {
		fmt.Fprintf(&b, "    webhook_configs:\n      - url: %s\n        send_resolved: true\n", quoteYAML(r.Default))
	}
	fmt.Fprintf(&b, `  - name: pager
    webhook_configs:
      - url: %s
        send_resolved: true
  - name: chat
    webhook_configs:
      - url: %s
        send_resolved: true
`, quoteYAML(r.Pager), quoteYAML(r.Chat))
	return []byte(b.String())
}

func quoteYAML(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// routing is the Alertmanager route tree, for AlertmanagerConfig.
const routing = `route:
  receiver: default
  group_by: [alertname]
  group_wait: %s
  group_interval: %s
  repeat_interval: %s
  routes:
    # Page at once for every critical alert, every time it fires: a short
    # group_wait, and a group_interval shorter than every critical alert's
    # keep_firing_for, so a second short outage is sent too.
    - matchers: ['severity="critical"']
      receiver: pager
      group_wait: %s
      group_interval: %s
      repeat_interval: %s
      continue: true
    # The team's channel sees warnings, and the pages too.
    - matchers: ['severity=~"warning|critical"']
      receiver: chat
      group_wait: %s
      group_interval: %s
      repeat_interval: %s
receivers:
  - name: default
`
