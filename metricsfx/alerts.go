package metricsfx

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Alert is one Prometheus alerting rule for the redisfx metrics. Expr holds
// placeholders: "P_" for "<prefix>_", "$job" for the application's scrape
// job, and every duration (rate windows, For, KeepFiringFor) is the
// production value, divided by Profile.Speedup when rendered.
type Alert struct {
	Name     string
	Severity string // critical or warning
	Expr     string
	For      string
	// KeepFiringFor keeps a critical alert firing that long after its
	// condition clears, so that even a short episode outlives the pager
	// route's group_interval and is sent (see PagerGroupInterval).
	KeepFiringFor string
	Summary       string
	// Metrics are the metric names (without prefix) the rule reads.
	Metrics []string
	// Fire and Calm are promtool inputs: series that hold the condition
	// just past the threshold, and just short of it.
	Fire, Calm []Series
	// EvalAt is when promtool evaluates (after the rate window and For).
	EvalAt string
	// Labels are the extra labels the firing alert carries.
	Labels map[string]string
	// Cases are further promtool scenarios: restarts, failed scrapes,
	// traffic that is not the customers'.
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

// Routing timings of the pager route (critical alerts), in production.
// Every critical alert's KeepFiringFor must exceed PagerGroupInterval by at
// least one evaluation and one send: an alert that fires and clears between
// two flushes of its group is otherwise never sent (Alertmanager compares
// the firing set at each flush, and a set that was empty at the last flush
// and is empty again has not changed).
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
	// lockTimeoutRatio: of the acquisitions that ended (acquired, or gave
	// up after WaitTimeout), the share that gave up. lock_attempts_total
	// counts every retry, so it is no denominator: three acquisitions that
	// all timed out after thousands of retries would read 0.001.
	lockTimeoutRatio = "sum(rate(P_lock_timeouts_total[5m])) / (sum(rate(P_lock_acquisitions_total[5m])) + sum(rate(P_lock_timeouts_total[5m])))"
	redisErrorRatio  = "sum(rate(P_errors_total[5m])) / sum(rate(P_commands_total[5m]))"
	// probeRoutes are the route labels of the requests that machines send,
	// not customers: httpfx's /metrics, /healthz and /readyz (its
	// MetricsPath, HealthPath and ReadyPath). The server-error ratio leaves
	// them out of both sides: a quiet service's scrapes and probes
	// outnumber its payments (5 failing payments among 80 probes read
	// 5.9 %), and /readyz answers 503 while Redis is down, an error no
	// customer saw.
	probeRoutes      = "/metrics|/healthz|/readyz"
	serverErrorRatio = `sum(rate(P_http_requests_total{code=~"5..",route!~"` + probeRoutes + `"}[5m])) / sum(rate(P_http_requests_total{route!~"` + probeRoutes + `"}[5m]))`
	// besideOutcomes are the idempotency outcomes counted beside a
	// request's own (idempotencyfx: replication misses, the fate of
	// outcomes recorded in the background, and stale_owner, counted when
	// the completion of a request already counted new is refused): the
	// store-error ratio's denominator leaves them out, or a cluster whose
	// every claim misses ReplicaAcks would halve the share of refused
	// requests.
	besideOutcomes  = "unreplicated_claim|unreplicated_completion|pending_completion|late_completion|lost_completion|stale_owner"
	storeErrorRatio = `sum(rate(P_idempotency_requests_total{outcome="store_error"}[5m])) / sum(rate(P_idempotency_requests_total{outcome!~"` + besideOutcomes + `"}[5m]))`
)

// The stream gauges keep their last value through an outage (streamfx),
// and the rules read them through held: a series that vanishes (a failed
// scrape, every instance restarting) does not resolve a lag or
// dead-letter alert whose cause is still there, and a restart or a
// scale-down does not keep one firing either.
var (
	lag = held("P_stream_consumer_lag", "namespace, job, stream, group")
	dlq = held(`P_stream_length{stream=~".+:dlq"}`, "namespace, job, stream")
)

// held reads a backlog gauge per stream (by: the labels that name one
// backlog; never instance or pod): the largest reading of the instances
// that report it now (they all read the same Redis), and only when none
// does, the last such reading of the past hour. Not last_over_time per
// series: in a rolling restart or a scale-down the instance that went away
// would keep its last reading for an hour, and a dead-letter stream the
// operator emptied (a live reading of 0 from the new instance) would stay
// in alert. The subquery's step (heldStep) must not exceed the scrape
// interval: it samples the live reading at each step, so a reading taken
// after the last step before a failed scrape would be missed, and an older
// one held (an adversary's 1m step held 150 over a 0 read 45 s before).
func held(selector, by string) string {
	live := "max by (" + by + ") (" + selector + ")"
	return "(" + live + " or last_over_time((" + live + ")[1h:" + heldStep + "]))"
}

// heldStep is held's subquery step: the shortest scrape interval whose
// freshest reading the rules hold (720 samples an hour per backlog).
const heldStep = "5s"

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

// Alerts are the rules: the plugins' signals at a warning and a critical
// level, and what an on-call engineer of a payments service needs besides
// (a target that stops answering or vanishes, Redis command errors,
// idempotency store errors and fail-open executions, server errors, failing
// trace export). docs/monitoring.md says why each level is what it is.
var Alerts = []Alert{
	{Name: "StoreConnectionLost", Severity: "critical", Expr: "P_store_up == 0", For: "1m", KeepFiringFor: keepFiring,
		Summary: "Redis is unreachable from the application", Metrics: []string{"store_up"},
		Fire: []Series{{`P_store_up{client="default"}`, "0x10"}}, Calm: []Series{{`P_store_up{client="default"}`, "1x10"}},
		EvalAt: "5m", Labels: map[string]string{"client": "default"}},
	{Name: "CacheHitRateCritical", Severity: "critical", Expr: hitRatio + " < 0.7", For: "5m", KeepFiringFor: keepFiring,
		Summary: "Cache hit rate below 70%", Metrics: []string{"cache_hits_total", "cache_misses_total"},
		Fire: counters("P_cache_hits_total", "69", "P_cache_misses_total", "31"), Calm: counters("P_cache_hits_total", "71", "P_cache_misses_total", "29"), EvalAt: "20m"},
	{Name: "LockTimeoutRateCritical", Severity: "critical", Expr: lockTimeoutRatio + " > 0.1", For: "5m", KeepFiringFor: keepFiring,
		Summary: "More than 10% of lock acquisitions time out", Metrics: []string{"lock_timeouts_total", "lock_acquisitions_total"},
		Fire: counters("P_lock_timeouts_total", "11", "P_lock_acquisitions_total", "89"), Calm: counters("P_lock_timeouts_total", "9", "P_lock_acquisitions_total", "91"), EvalAt: "20m"},
	{Name: "StreamConsumerLagCritical", Severity: "critical", Expr: lag + " > 10000", For: "5m", KeepFiringFor: keepFiring,
		Summary: "Stream consumers are more than 10000 messages behind", Metrics: []string{"stream_consumer_lag"},
		Fire: []Series{{"P_stream_consumer_lag", "10001x20"}}, Calm: []Series{{"P_stream_consumer_lag", "10000x20"}}, EvalAt: "10m",
		Cases: backlogCases(lagSeries, lagLabels, "10001")},
	{Name: "CacheHitRateLow", Severity: "warning", Expr: hitRatio + " < 0.85", For: "10m",
		Summary: "Cache hit rate below 85%", Metrics: []string{"cache_hits_total", "cache_misses_total"},
		Fire: counters("P_cache_hits_total", "84", "P_cache_misses_total", "16"), Calm: counters("P_cache_hits_total", "86", "P_cache_misses_total", "14"), EvalAt: "25m"},
	{Name: "LockContentionHigh", Severity: "warning", Expr: lockP99 + " > 0.5", For: "10m",
		Summary: "Lock wait p99 above 500ms", Metrics: []string{"lock_wait_seconds"},
		Fire: lockWait("0.5", 985), Calm: lockWait("0.5", 995), EvalAt: "25m"},
	{Name: "DLQNotEmpty", Severity: "warning", Expr: dlq + " > 0", For: "5m",
		Summary: "A dead-letter stream has messages", Metrics: []string{"stream_length"},
		Fire: []Series{{`P_stream_length{stream="orders:dlq"}`, "1x20"}}, Calm: []Series{{`P_stream_length{stream="orders:dlq"}`, "0x20"}, {`P_stream_length{stream="orders"}`, "500x20"}},
		EvalAt: "10m", Labels: map[string]string{"stream": "orders:dlq"},
		Cases: backlogCases(dlqSeries, dlqLabels, "1")},
	{Name: "RateLimitRejectionHigh", Severity: "warning", Expr: rejectRatio + " > 0.1", For: "10m",
		Summary: "More than 10% of requests are rate limited", Metrics: []string{"ratelimit_rejected_total", "ratelimit_allowed_total"},
		Fire: counters("P_ratelimit_rejected_total", "11", "P_ratelimit_allowed_total", "89"), Calm: counters("P_ratelimit_rejected_total", "9", "P_ratelimit_allowed_total", "91"), EvalAt: "25m"},
	// The threshold table's other levels.
	{Name: "LockTimeoutRateHigh", Severity: "warning", Expr: lockTimeoutRatio + " > 0.05", For: "10m",
		Summary: "More than 5% of lock acquisitions time out", Metrics: []string{"lock_timeouts_total", "lock_acquisitions_total"},
		Fire: counters("P_lock_timeouts_total", "6", "P_lock_acquisitions_total", "94"), Calm: counters("P_lock_timeouts_total", "4", "P_lock_acquisitions_total", "96"), EvalAt: "25m"},
	{Name: "LockContentionCritical", Severity: "critical", Expr: lockP99 + " > 2", For: "5m", KeepFiringFor: keepFiring,
		Summary: "Lock wait p99 above 2s", Metrics: []string{"lock_wait_seconds"},
		Fire: lockWait("2", 985), Calm: lockWait("2", 995), EvalAt: "20m"},
	{Name: "StreamConsumerLagHigh", Severity: "warning", Expr: lag + " > 1000", For: "10m",
		Summary: "Stream consumers are more than 1000 messages behind", Metrics: []string{"stream_consumer_lag"},
		Fire: []Series{{"P_stream_consumer_lag", "1001x30"}}, Calm: []Series{{"P_stream_consumer_lag", "1000x30"}}, EvalAt: "15m",
		Cases: backlogCases(lagSeries, lagLabels, "1001")},
	{Name: "DLQSizeCritical", Severity: "critical", Expr: dlq + " > 100", For: "5m", KeepFiringFor: keepFiring,
		Summary: "A dead-letter stream holds more than 100 messages", Metrics: []string{"stream_length"},
		Fire: []Series{{`P_stream_length{stream="orders:dlq"}`, "101x20"}}, Calm: []Series{{`P_stream_length{stream="orders:dlq"}`, "100x20"}},
		EvalAt: "10m", Labels: map[string]string{"stream": "orders:dlq"},
		Cases: backlogCases(dlqSeries, dlqLabels, "101")},
	{Name: "RateLimitRejectionCritical", Severity: "critical", Expr: rejectRatio + " > 0.3", For: "5m", KeepFiringFor: keepFiring,
		Summary: "More than 30% of requests are rate limited", Metrics: []string{"ratelimit_rejected_total", "ratelimit_allowed_total"},
		Fire: counters("P_ratelimit_rejected_total", "31", "P_ratelimit_allowed_total", "69"), Calm: counters("P_ratelimit_rejected_total", "29", "P_ratelimit_allowed_total", "71"), EvalAt: "20m"},
	// What an on-call engineer of a payments service needs besides.
	{Name: "TargetDown", Severity: "critical", Expr: `up{job="$job"} == 0`, For: "1m", KeepFiringFor: keepFiring,
		Summary: "Prometheus cannot scrape the application (process down, or /metrics failing)", Metrics: []string{},
		Fire: []Series{{"up" + target, "0x10"}}, Calm: []Series{{"up" + target, "1x10"}},
		EvalAt: "5m", Labels: map[string]string{"job": "$job", "instance": "app:8080"}},
	{Name: "TargetMissing", Severity: "critical", Expr: `absent(up{job="$job"})`, For: "5m", KeepFiringFor: keepFiring,
		Summary: "Prometheus has no target for the application's job: nothing about it is monitored", Metrics: []string{},
		Fire: []Series{{`up{job="other",instance="x:1"}`, "1x10"}}, Calm: []Series{{"up" + target, "1x10"}},
		EvalAt: "8m", Labels: map[string]string{"job": "$job"}},
	{Name: "StoreUpMissing", Severity: "warning", Expr: `up{job="$job"} == 1 unless on (job, instance) P_store_up`, For: "5m",
		Summary: "The application answers scrapes but exports no store_up: StoreConnectionLost cannot fire (wrong metric prefix, or storefx missing)", Metrics: []string{"store_up"},
		Fire: []Series{{"up" + target, "1x10"}}, Calm: []Series{{"up" + target, "1x10"}, {`P_store_up{job="$job",instance="app:8080",client="default"}`, "1x10"}},
		EvalAt: "8m", Labels: map[string]string{"job": "$job", "instance": "app:8080"}},
	{Name: "RedisErrorRateHigh", Severity: "warning", Expr: redisErrorRatio + " > 0.01", For: "5m",
		Summary: "More than 1% of Redis commands fail", Metrics: []string{"errors_total", "commands_total"},
		Fire: counters("P_errors_total", "2", `P_commands_total{command="GET"}`, "100"), Calm: counters("P_errors_total", "1", `P_commands_total{command="GET"}`, "200"), EvalAt: "20m"},
	{Name: "IdempotencyStoreErrors", Severity: "warning", Expr: `sum(increase(P_idempotency_requests_total{outcome="store_error"}[5m])) > 0`, For: "1m",
		Summary: "Idempotent requests were refused because Redis failed (fail-closed: the client got 500)", Metrics: []string{"idempotency_requests_total"},
		Fire: counters(`P_idempotency_requests_total{outcome="store_error"}`, "1", `P_idempotency_requests_total{outcome="new"}`, "1000"),
		Calm: counters(`P_idempotency_requests_total{outcome="store_error"}`, "0", `P_idempotency_requests_total{outcome="new"}`, "1000"), EvalAt: "20m"},
	{Name: "IdempotencyStoreErrorsCritical", Severity: "critical", Expr: storeErrorRatio + " > 0.01", For: "2m", KeepFiringFor: keepFiring,
		Summary: "More than 1% of idempotent requests fail because Redis fails", Metrics: []string{"idempotency_requests_total"},
		Fire: counters(`P_idempotency_requests_total{outcome="store_error"}`, "2", `P_idempotency_requests_total{outcome="new"}`, "98"),
		Calm: counters(`P_idempotency_requests_total{outcome="store_error"}`, "1", `P_idempotency_requests_total{outcome="new"}`, "199"), EvalAt: "20m",
		Cases: []Case{{Why: "3 of 200 requests refused while every claim misses ReplicaAcks (counted unreplicated_claim beside new): 1.5 % of the requests, not 3 of 397",
			In: counters(`P_idempotency_requests_total{outcome="store_error"}`, "3", `P_idempotency_requests_total{outcome="new"}`, "197",
				`P_idempotency_requests_total{outcome="unreplicated_claim"}`, "197", `P_idempotency_requests_total{outcome="pending_completion"}`, "5"),
			Evals: []Eval{{At: "20m", Fire: true}}}}},
	{Name: "IdempotencyFailOpen", Severity: "critical", Expr: `sum(increase(P_idempotency_requests_total{outcome="fail_open"}[5m])) > 0`, For: "0s", KeepFiringFor: keepFiring,
		Summary: "Handlers ran without duplicate protection (fail-open with Redis failing): a retried payment may be charged twice", Metrics: []string{"idempotency_requests_total"},
		Fire: counters(`P_idempotency_requests_total{outcome="fail_open"}`, "1", `P_idempotency_requests_total{outcome="new"}`, "1000"),
		Calm: counters(`P_idempotency_requests_total{outcome="fail_open"}`, "0", `P_idempotency_requests_total{outcome="new"}`, "1000"), EvalAt: "20m"},
	{Name: "IdempotencyOutcomeLost", Severity: "critical", Expr: `sum(increase(P_idempotency_requests_total{outcome="lost_completion"}[5m])) > 0`, For: "0s", KeepFiringFor: keepFiring,
		Summary: "A handler ran but recording its outcome was never confirmed: a retry of that key may run the handler again", Metrics: []string{"idempotency_requests_total"},
		Fire: counters(`P_idempotency_requests_total{outcome="lost_completion"}`, "1", `P_idempotency_requests_total{outcome="new"}`, "1000"),
		Calm: counters(`P_idempotency_requests_total{outcome="lost_completion"}`, "0", `P_idempotency_requests_total{outcome="new"}`, "1000"), EvalAt: "20m"},
	{Name: "HTTPServerErrorRateHigh", Severity: "warning", Expr: serverErrorRatio + " > 0.05", For: "5m",
		Summary: "More than 5% of customer requests answer 5xx (probes and scrapes not counted)", Metrics: []string{"http_requests_total"},
		Fire: counters(`P_http_requests_total{code="500"}`, "6", `P_http_requests_total{code="201"}`, "94"),
		Calm: counters(`P_http_requests_total{code="500"}`, "4", `P_http_requests_total{code="201"}`, "96"), EvalAt: "20m",
		Cases: probeCases("20m")},
	{Name: "HTTPServerErrorRateCritical", Severity: "critical", Expr: serverErrorRatio + " > 0.2", For: "2m", KeepFiringFor: keepFiring,
		Summary: "More than 20% of customer requests answer 5xx (probes and scrapes not counted)", Metrics: []string{"http_requests_total"},
		Fire: counters(`P_http_requests_total{code="503"}`, "21", `P_http_requests_total{code="201"}`, "79"),
		Calm: counters(`P_http_requests_total{code="503"}`, "19", `P_http_requests_total{code="201"}`, "81"), EvalAt: "20m",
		Cases: probeCases("20m")},
	{Name: "TraceExportFailing", Severity: "warning", Expr: "sum(rate(P_tracing_export_errors_total[5m])) > 0", For: "15m",
		Summary: "Spans have failed to reach the trace backend for 15 minutes (traces are being lost)", Metrics: []string{"tracing_export_errors_total"},
		Fire: []Series{{"P_tracing_export_errors_total", "0+1x40"}}, Calm: []Series{{"P_tracing_export_errors_total", "0x10 1x30"}}, EvalAt: "30m"},
}

// Profile is how the rules and the routing are rendered.
type Profile struct {
	// Prefix is the application's metric prefix (metricsfx.Config.Prefix).
	Prefix string
	// Job is the Prometheus scrape job of the application, which the
	// TargetDown and TargetMissing rules select. Default: Prefix.
	Job string
	// Speedup divides every duration: rate and hold windows, for,
	// keep_firing_for and the Alertmanager timings. 0 or 1 is production;
	// the end-to-end test uses 60, so that 5 minutes become 5 seconds.
	Speedup int
}

func (p Profile) job() string {
	if p.Job != "" {
		return p.Job
	}
	return p.Prefix
}

func (p Profile) speedup() int64 { return int64(max(p.Speedup, 1)) }

// scale divides a duration written as Prometheus does ("5m", "1h", "0s").
func (p Profile) scale(d string) string {
	v, err := time.ParseDuration(d)
	if err != nil {
		panic("metricsfx: bad duration " + d)
	}
	return promDuration(v / time.Duration(p.speedup()))
}

// promDuration prints d in the largest unit that divides it, as Prometheus
// and Alertmanager read durations.
func promDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d%u.unit == 0 {
			return fmt.Sprintf("%d%s", d/u.unit, u.name)
		}
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// expr renders an expression for the profile: prefix, windows, then the
// job, last, so that a job name holding brackets ("api[eu]") is not read
// as a window; it is escaped as a PromQL string.
func (p Profile) expr(e string) string {
	e = withPrefix(e, p.Prefix)
	var out strings.Builder
	for {
		open := strings.Index(e, "[")
		if open < 0 {
			out.WriteString(e)
			break
		}
		end := strings.Index(e[open:], "]")
		window := e[open+1 : open+end]
		if rng, step, sub := strings.Cut(window, ":"); sub { // a subquery, [range:step]
			window = p.scale(rng) + ":" + p.scale(step)
		} else {
			window = p.scale(window)
		}
		out.WriteString(e[:open+1] + window + "]")
		e = e[open+end+1:]
	}
	return strings.ReplaceAll(out.String(), "$job", promString.Replace(p.job()))
}

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
		fmt.Fprintf(&b, "      - alert: %s\n        expr: %s\n        for: %s\n", a.Name, quoteYAML(p.expr(a.Expr)), p.scale(a.For))
		if a.KeepFiringFor != "" {
			fmt.Fprintf(&b, "        keep_firing_for: %s\n", p.scale(a.KeepFiringFor))
		}
		fmt.Fprintf(&b, "        labels:\n          severity: %s\n", a.Severity)
		fmt.Fprintf(&b, "        annotations:\n          summary: %s\n          runbook: %s\n",
			quoteYAML(a.Summary), quoteYAML("docs/monitoring.md#"+strings.ToLower(a.Name)))
	}
	return []byte(b.String())
}

// AlertRuleTests renders a promtool test file for the production rules of
// the same prefix and job: for every alert, it fires after its For when the
// condition holds just past the threshold, stays silent just short of it,
// and reads its Cases right (for the backlog rules, restarts, failed
// scrapes and scale-downs; for the server-error rules, scrapes and probes).
func AlertRuleTests(p Profile, rulesFile string) []byte {
	p.Speedup = 1
	var b strings.Builder
	b.WriteString(p.header(" -tests"))
	fmt.Fprintf(&b, "rule_files:\n  - %s\nevaluation_interval: 1m\ntests:\n", rulesFile)
	for _, a := range Alerts {
		cases := append([]Case{
			{In: a.Fire, Evals: []Eval{{a.EvalAt, true}}},
			{In: a.Calm, Evals: []Eval{{a.EvalAt, false}}},
		}, a.Cases...)
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
				fmt.Fprintf(&b, "      - series: %s\n        values: %s\n", quoteYAML(p.expr(s.Name)), quoteYAML(s.Values))
			}
			b.WriteString("    alert_rule_test:\n")
			labels := a.Labels
			if c.Labels != nil {
				labels = c.Labels
			}
			for _, e := range c.Evals {
				p.writeEval(&b, a, e, labels)
			}
		}
	}
	return []byte(b.String())
}

// writeEval writes one alert_rule_test entry: a fires at e.At with labels,
// or does not fire.
func (p Profile) writeEval(b *strings.Builder, a Alert, e Eval, labels map[string]string) {
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
		fmt.Fprintf(b, "              %s: %s\n", k, quoteYAML(p.expr(labels[k])))
	}
	fmt.Fprintf(b, "            exp_annotations:\n              summary: %s\n              runbook: %s\n",
		quoteYAML(a.Summary), quoteYAML("docs/monitoring.md#"+strings.ToLower(a.Name)))
}

// Receivers are the webhook URLs of the three receivers; an empty URL
// renders a placeholder (pager, chat) or no webhook (default).
type Receivers struct{ Pager, Chat, Default string }

// AlertmanagerConfig is the routing: critical alerts page (pager receiver)
// and continue to the team's chat, warnings go to chat, everything else to
// the default receiver. Timings are the production ones divided by
// p.Speedup (see docs/monitoring.md for why each is what it is).
func AlertmanagerConfig(p Profile, r Receivers) []byte {
	d := func(v time.Duration) string { return promDuration(v / time.Duration(p.speedup())) }
	if r.Pager == "" {
		r.Pager = "http://pager.invalid/<API_KEY>"
	}
	if r.Chat == "" {
		r.Chat = "http://chat.invalid/<ACCESS_TOKEN>"
	}
	var b strings.Builder
	b.WriteString(p.header(" -alertmanager"))
	b.WriteString("# Routing of the redisfx alerts: replace the receivers' endpoints.\n")
	fmt.Fprintf(&b, `route:
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
`, d(ChatGroupWait), d(ChatGroupInterval), d(ChatRepeatInterval),
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
