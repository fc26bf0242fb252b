package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/redistest"
)

// No secret leaks: the Redis password, the caller's Authorization header,
// the exporter's credentials, the request body, the card number (the name
// of the card's lock) and the secret that keys its digest never appear in
// logs, spans or metrics, with every plugin on (cache, card lock, rate
// limit, streams). A full run is captured and grepped for planted values.
func TestNoSecretsInLogsSpansOrMetrics(t *testing.T) {
	t.Parallel()
	const redisPW, bearer, body, exporterToken = "PLANTED-REDIS-PW-7731", "PLANTED-BEARER-9920", "PLANTED-BODY-5150", "PLANTED-EXPORTER-4410"
	const card, hashSecret = "4242424242424242", "PLANTED-HASH-SECRET-6620"
	plugins := []string{"PAYMENTS_CARD_LOCK=on", "RATE_LIMIT=1000/1m", "PAYMENTS_KEY_HASH_SECRET=" + hashSecret}
	srv := redistest.StartPrivate(t, redistest.WithArgs("--requirepass", redisPW))
	redisURL := "redis://:" + redisPW + "@" + srv.Addr()

	send := func(p *proc) string {
		for i, key := range []string{"s1", "s1", "s2"} {
			req, _ := http.NewRequest(http.MethodPost, p.url+"/payments",
				strings.NewReader(`{"amount":100,"currency":"EUR","card":"`+card+`","note":"`+body+`"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+bearer)
			req.Header.Set("Idempotency-Key", key)
			if i == 2 {
				req.Header.Set("Idempotency-Key", "has space "+bearer) // an invalid key, logged nowhere either
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		p.do("GET", "/payments/pay_0", "", "") // a cache read (a miss; the 404 is not cached)
		return p.do("GET", "/metrics", "", "").body
	}
	check := func(where, text string) {
		t.Helper()
		for _, secret := range []string{redisPW, bearer, body, exporterToken, card, hashSecret} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains the planted secret %s", where, secret)
			}
		}
	}

	// Run 1: console spans on stdout, logs on stderr.
	p := start(t, append([]string{"REDIS_URL=" + redisURL, "TRACING_EXPORTER=console", "IDEMPOTENCY_KEY_PREFIX=" + redistest.Prefix(t)}, plugins...)...)
	metrics := send(p)
	// A span is written when it ends, just after its response; the
	// consumer's stream.consume a little later.
	spansDeadline := time.Now().Add(10 * time.Second)
	want := []string{`"name":"POST /payments"`, `"name":"lock.acquire"`, `"name":"lock.release"`, `"name":"rate_limit.check"`, `"name":"cache.`, `"name":"stream.publish"`, `"name":"stream.consume"`}
	missing := func() (m []string) {
		for _, w := range want {
			if !strings.Contains(p.stdout.String(), w) {
				m = append(m, w)
			}
		}
		return m
	}
	for len(missing()) > 0 && time.Now().Before(spansDeadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m := missing(); len(m) > 0 || !strings.Contains(metrics, "payments_http_requests_total") {
		t.Fatalf("the run produced no %v spans or no metrics: the check would prove nothing", m)
	}
	if !strings.Contains(p.stdout.String(), `"redisfx.lock.key":"hmac-sha256:`) {
		t.Error("the card lock's spans do not carry the keyed digest of its name")
	}
	check("stdout (spans)", p.stdout.String())
	check("stderr (logs)", p.stderr.String())
	check("/metrics", metrics)

	// Run 2: OTLP to a backend that rejects the credentials; the failures
	// are logged without them.
	var rejected atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rejected.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer backend.Close()
	p2 := start(t, append([]string{"REDIS_URL=" + redisURL, "TRACING_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=" + backend.URL,
		"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20" + exporterToken, "OTEL_BSP_SCHEDULE_DELAY=50",
		"IDEMPOTENCY_KEY_PREFIX=" + redistest.Prefix(t)}, plugins...)...)
	metrics = send(p2)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p2.stderr.String(), "opentelemetry") {
		if time.Now().After(deadline) {
			t.Fatalf("the rejected export was not logged (%d rejections)", rejected.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	check("stderr with a rejecting backend", p2.stderr.String())
	if m := p2.do("GET", "/metrics", "", "").body; !strings.Contains(m, "payments_tracing_export_errors_total") || strings.Contains(m, "payments_tracing_export_errors_total 0\n") {
		t.Error("export failures are not visible in /metrics")
	}
	check("/metrics (otlp run)", metrics)
}
