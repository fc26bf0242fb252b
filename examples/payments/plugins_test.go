package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/metricsfx"
)

// metric returns the value of the series (a full "name{labels}" as
// Prometheus prints it) in a scrape, or -1 when absent.
func metric(scrape, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// The cache, lock and stream plugins as a client and an operator see them:
// reads served from the cache, a card held by another process turning
// into a lock timeout, payment.created consumed by the receipts handler,
// and every one of these counted on /metrics where the alert rules read it.
func TestPayments_CacheLockAndStream_MetricsSeeRealSeries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t), "PAYMENTS_CARD_LOCK=on", "PAYMENTS_LOCK_WAIT=150ms")
	created := p.pay("plug-1", card)
	if created.status != 201 {
		t.Fatalf("POST: %d %s", created.status, created.body)
	}
	var pay Payment
	_ = json.Unmarshal([]byte(created.body), &pay)
	for i := range 3 { // a miss (loaded, cached), then hits from the first layer
		if r := p.do("GET", "/payments/"+pay.ID, "", ""); r.status != 200 || r.body != created.body {
			t.Fatalf("GET #%d: %d %s", i, r.status, r.body)
		}
	}
	problem(t, p.do("GET", "/payments/pay_unknown", "", ""), 404, "payment_not_found") // a miss, not cached
	problem(t, p.do("GET", "/payments/pay_unknown", "", ""), 404, "payment_not_found")

	// Another process holds this card's lock: the charge waits 150ms, then
	// gives up with 503 card_busy, and nothing is charged.
	busyCard := "5555555555554444"
	srv.Client().Set(context.Background(), "lock:{card:"+busyCard+"}", "another-process", 10*time.Second)
	busy := p.pay("plug-2", `{"amount":500,"currency":"EUR","card":"`+busyCard+`"}`)
	problem(t, busy, 503, "card_busy")
	if busy.header.Get("Retry-After") != "1" {
		t.Errorf("card_busy Retry-After %q", busy.header.Get("Retry-After"))
	}

	// The receipt of the first payment is sent by the in-process consumer.
	waitUntil(t, func() bool { return strings.Contains(p.stderr.String(), `"msg":"receipt sent","payment":"`+pay.ID+`"`) })
	var scrape string
	waitUntil(t, func() bool { // the consumer's ack lands just after its log line; the backlog is read every 5s
		scrape = p.do("GET", "/metrics", "", "").body
		return metric(scrape, `payments_stream_consumer_lag{group="payments",stream="payment.created"}`) == 0 &&
			metric(scrape, `payments_stream_length{stream="payment.created"}`) == 1
	})
	for series, want := range map[string]float64{
		`payments_cache_hits_total{layer="local"}`:                                     2,
		`payments_cache_hits_total{layer="redis"}`:                                     0,
		`payments_cache_misses_total`:                                                  3,
		`payments_cache_size{layer="local"}`:                                           1,
		`payments_cache_stampede_prevented_total`:                                      0,
		`payments_lock_acquisitions_total`:                                             1,
		`payments_lock_timeouts_total`:                                                 1,
		`payments_locks_active`:                                                        0,
		`payments_lock_wait_seconds_count`:                                             2,
		`payments_lock_wait_duration_seconds_count`:                                    2,
		`payments_stream_length{stream="payment.created"}`:                             1,
		`payments_stream_length{stream="payment.created:dlq"}`:                         0,
		`payments_stream_messages_total{outcome="processed",stream="payment.created"}`: 1,
		`payments_ratelimit_requests_total{status="rejected"}`:                         0,
		`payments_http_requests_total{code="503",method="POST",route="/payments"}`:     1,
		`payments_idempotency_requests_total{outcome="new"}`:                           2,
		`payments_http_requests_total{code="404",method="GET",route="/payments/{id}"}`: 2,
		`payments_http_requests_total{code="200",method="GET",route="/payments/{id}"}`: 3,
		`payments_stream_consumer_lag{group="payments",stream="payment.created"}`:      0,
		`payments_lock_wait_seconds_bucket{le="0.1"}`:                                  1,
	} {
		if got := metric(scrape, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// Every metric an alert rule reads is a real series of this scrape.
	for _, a := range metricsfx.Alerts {
		for _, m := range a.Metrics {
			if !regexp.MustCompile(`(?m)^payments_` + m + `(_bucket|_count)?[{ ]`).MatchString(scrape) {
				t.Errorf("alert %s reads %s, which /metrics does not export", a.Name, m)
			}
		}
	}
	if attempts := metric(scrape, "payments_lock_attempts_total"); attempts < 3 {
		t.Errorf("lock_attempts_total %v: the busy card was tried only once", attempts)
	}
	// The busy card's payment is recorded as an execution that failed.
	if ex := p.executions(); len(ex) != 2 || ex[1].Status != "failed" {
		t.Errorf("executions %+v", ex)
	}
}

// Concurrent payments with one card (different keys) all go through: the
// card's lock serialises only the charge, not the processor latency.
func TestPayments_ConcurrentPaymentsWithOneCard_AllSucceed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t), "PAYMENTS_DELAY=100ms", "PAYMENTS_CARD_LOCK=on")
	var wg sync.WaitGroup
	statuses := make([]int, 30)
	began := time.Now()
	for i := range statuses {
		wg.Add(1)
		go func() { defer wg.Done(); statuses[i] = p.pay(fmt.Sprint("same-card-", i), card).status }()
	}
	wg.Wait()
	took := time.Since(began)
	for i, s := range statuses {
		if s != 201 {
			t.Fatalf("payment %d: %d", i, s)
		}
	}
	if n := len(p.executions()); n != 30 {
		t.Fatalf("%d executions", n)
	}
	t.Logf("30 concurrent payments with one card, 100ms processor latency each: %v", took)
}

// Rate limiting (and the card lock) are off by default; with RATE_LIMIT, limits POST
// /payments per client: 429 problem+json with Retry-After and RateLimit
// headers, the handler not run.
func TestPayments_RateLimit_OffByDefault_OnWhenConfigured(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	off := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t))
	if r := off.pay("rl-0", card); r.status != 201 || r.header.Get("RateLimit-Policy") != "" {
		t.Fatalf("default: %d, RateLimit-Policy %q", r.status, r.header.Get("RateLimit-Policy"))
	}
	if n := metric(off.do("GET", "/metrics", "", "").body, "payments_lock_acquisitions_total"); n != 0 {
		t.Fatalf("the card lock is off by default, yet %v acquisitions", n)
	}
	on := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t), "RATE_LIMIT=2/1m", "METRICS_PREFIX=rl")
	for i, want := range []int{201, 201, 429} {
		r := on.pay(fmt.Sprint("rl-", i+1), card)
		if r.status != want {
			t.Fatalf("POST %d: %d, want %d", i+1, r.status, want)
		}
		if r.header.Get("RateLimit-Policy") != `"payments";q=2;w=60` ||
			!strings.HasPrefix(r.header.Get("RateLimit"), `"payments";r=`+strconv.Itoa(max(1-i, 0))+";t=") {
			t.Fatalf("POST %d headers %v", i+1, r.header)
		}
		if want == 429 {
			problem(t, r, 429, "rate_limit_exceeded")
			if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 1 || ra > 60 {
				t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
			}
		}
	}
	if n := len(on.executions()); n != 2 {
		t.Fatalf("%d executions with a limit of 2", n)
	}
	scrape := on.do("GET", "/metrics", "", "").body
	if metric(scrape, "rl_ratelimit_rejected_total") != 1 || metric(scrape, "rl_ratelimit_allowed_total") != 2 ||
		metric(scrape, `rl_ratelimit_requests_total{status="rejected"}`) != 1 {
		t.Errorf("rate-limit metrics:\n%s", grepLines(scrape, "rl_ratelimit"))
	}
}

func TestPayments_InvalidPluginEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ env, variable string }{
		{"RATE_LIMIT=lots", "RATE_LIMIT"}, {"RATE_LIMIT=0/1m", "RATE_LIMIT"}, {"RATE_LIMIT=5/soon", "RATE_LIMIT"},
		{"RATE_LIMIT=5/1500us", "RATE_LIMIT"}, // ratelimitfx counts whole milliseconds
		{"RATE_LIMIT_TRUSTED_PROXIES=10.0.0.0/99", "RATE_LIMIT_TRUSTED_PROXIES"}, {"PAYMENTS_LOCK_WAIT=-1s", "PAYMENTS_LOCK_WAIT"},
		{"PAYMENTS_CARD_LOCK=maybe", "PAYMENTS_CARD_LOCK"},
	} {
		_, err := LoadEnv(func(k string) string {
			name, v, _ := strings.Cut(tc.env, "=")
			if k == name {
				return v
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), tc.variable) {
			t.Errorf("%s: %v", tc.env, err)
		}
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The plugins work on the embedded Redis too (its scripts, streams and
// pub/sub are miniredis's): cached reads, the card lock, the receipt
// consumer and the rate limit.
func TestPayments_PluginsOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	p := start(t, "RATE_LIMIT=3/1m", "PAYMENTS_CARD_LOCK=on")
	created := p.pay("emb-1", card)
	if created.status != 201 || !strings.HasPrefix(created.header.Get("RateLimit"), `"payments";r=2;t=`) {
		t.Fatalf("POST: %d %v", created.status, created.header)
	}
	var pay Payment
	_ = json.Unmarshal([]byte(created.body), &pay)
	for range 2 {
		if r := p.do("GET", "/payments/"+pay.ID, "", ""); r.status != 200 || r.body != created.body {
			t.Fatalf("GET: %d %s", r.status, r.body)
		}
	}
	waitUntil(t, func() bool { return strings.Contains(p.stderr.String(), `"msg":"receipt sent","payment":"`+pay.ID+`"`) })
	p.pay("emb-2", card)
	p.pay("emb-3", card)
	problem(t, p.pay("emb-4", card), 429, "rate_limit_exceeded")
	scrape := p.do("GET", "/metrics", "", "").body
	for series, want := range map[string]float64{
		`payments_cache_hits_total{layer="local"}`: 1, `payments_cache_misses_total`: 1,
		`payments_lock_acquisitions_total`: 3, `payments_ratelimit_rejected_total`: 1, `payments_errors_total`: 0,
	} {
		if got := metric(scrape, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// With fail-open and Redis down, payments still go through (the app chose
// availability): the card lock is skipped, like the idempotency claim, and
// a created payment is still readable by id.
func TestPayments_StoreDown_FailOpen_ChargesWithoutTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_ERROR_POLICY=fail-open", "PAYMENTS_CARD_LOCK=on")
	srv.Kill()
	r := p.pay("open", card)
	if r.status != 201 {
		t.Fatalf("fail-open POST with Redis down: %d %s", r.status, r.body)
	}
	var pay Payment
	_ = json.Unmarshal([]byte(r.body), &pay)
	if g := p.do("GET", "/payments/"+pay.ID, "", ""); g.status != 200 || g.body != r.body {
		t.Fatalf("GET with Redis down: %d %s", g.status, g.body)
	}
	if n := len(p.executions()); n != 1 {
		t.Fatalf("%d executions", n)
	}
	if !strings.Contains(p.stderr.String(), "charging without it (fail-open)") {
		t.Error("no log line about charging without the lock")
	}
}

// A client that gives up while its payment is charged under the card lock
// leaves a payment that stands: the charge, its lock and its announcement
// do not stop for a client that left, so the retry is replayed the 201
// (found by an adversary: the lock was asked with the request's context,
// which the disconnect cancelled, and the payment was recorded failed).
func TestPayments_ClientLeavesUnderTheCardLock_PaymentStandsAndReplays(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t), "PAYMENTS_DELAY=300ms", "PAYMENTS_CARD_LOCK=on")
	req, _ := http.NewRequest(http.MethodPost, p.url+"/payments", strings.NewReader(card))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "gone")
	if _, err := (&http.Client{Timeout: 100 * time.Millisecond}).Do(req); err == nil {
		t.Fatal("the impatient client got an answer before PAYMENTS_DELAY")
	}
	r := p.pay("gone", card) // waits for the first execution, then replays it
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry got %d %q %s, want the 201 replayed", r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}
	if list := p.executions(); len(list) != 1 || list[0].Status != "succeeded" {
		t.Fatalf("executions %+v, want one succeeded", list)
	}
	waitUntil(t, func() bool { return strings.Contains(p.stderr.String(), "receipt sent") })
	if strings.Contains(p.stderr.String(), "payment.created not published") {
		t.Fatal("the announcement stopped for the client that left")
	}
}

// Everything the process writes on stderr is JSON, go-redis's own lines
// too (a dial that fails), as the contract says: "Logs go to stderr as
// JSON (zap)".
func TestPayments_RedisClientLogsAreJSON(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), "HTTP_ADDR=127.0.0.1:0", "REDIS_URL=redis://127.0.0.1:1/0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1 (Redis unreachable)\n%s", err, stderr.String())
	}
	routed := false
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			t.Fatalf("a stderr line is not JSON: %q", line)
		}
		routed = routed || m["logger"] == "go-redis"
	}
	if !routed {
		t.Fatalf("no go-redis line reached the log:\n%s", stderr.String())
	}
}
