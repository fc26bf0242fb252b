package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/metricsfx"
)

// Secrets the run configures; none may reach a span or a log line.
const (
	redisPassword = "e2e-redis-s3cret"
	exporterToken = "e2e-exporter-t0ken"
)

// Card numbers the run pays with.
const (
	cardOK   = "4242424242424242"
	cardBusy = "5555555555554444" // its lock is held by "another process" in the lock scenario
)

// cardRedactionLanded: issue 19, item 1 (card numbers in the lock, cache
// and rate-limit key attributes) has landed: the plugins redact their key
// attributes unless Config.KeyAttribute says otherwise, and the payments
// example writes a keyed digest of its card lock's name. The "no card
// number in any span or log" assertion fails the run on any leak.
const cardRedactionLanded = true

// stack is everything the run started.
type stack struct {
	t      *testing.T
	redis  *redistest.Server
	proxy  *faultproxy.Proxy
	rdb    *redis.Client // straight to Redis, for what "another process" does
	traces *traceBackend
	hooks  *webhooks
	app    *daemon
	appURL string
	prom   promAPI
	amURL  string

	timings []*timing
	texts   map[string]string // everything(), built once after the traffic stopped
}

// timing is what the run measured for one alert: from the fault to the
// alert firing in Prometheus and to its first notification, and from the
// fix to its resolved notification.
type timing struct {
	Alert, Severity, Scenario string
	Receivers                 []string
	Firing, Notified          time.Duration
	Resolved                  time.Duration // 0: not measured (the next fault followed)
}

func TestObservability_OperatorView(t *testing.T) {
	prometheusBin := tool(t, "prometheus")
	alertmanagerBin := tool(t, "prometheus-alertmanager", "alertmanager")
	s := &stack{t: t}
	dir := t.TempDir()

	s.redis = redistest.StartPrivate(t, redistest.WithArgs("--requirepass", redisPassword))
	s.proxy = faultproxy.Start(t, s.redis.Addr())
	s.rdb = redis.NewClient(&redis.Options{Addr: s.redis.Addr(), Password: redisPassword, DisableIdentity: true})
	t.Cleanup(func() { _ = s.rdb.Close() })
	s.traces = startTraceBackend(t)
	s.hooks = startWebhooks(t)

	appAddr, amAddr, promAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	s.app = startDaemon(t, "payments", []string{
		"HTTP_ADDR=" + appAddr,
		"REDIS_URL=redis://:" + redisPassword + "@" + s.proxy.Addr(),
		"TRACING_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + s.traces.srv.URL,
		"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20" + exporterToken,
		"OTEL_EXPORTER_OTLP_TIMEOUT=1000", // ms: a failing backend shows within a second
		"OTEL_BSP_SCHEDULE_DELAY=200",     // ms
		"OTEL_SERVICE_NAME=payments",
		"PAYMENTS_CARD_LOCK=on", "PAYMENTS_LOCK_WAIT=300ms",
		"RATE_LIMIT=20/5s", "RATE_LIMIT_TRUSTED_PROXIES=127.0.0.1/32",
	}, paymentsBin)
	s.appURL = "http://" + appAddr
	waitHTTP(t, s.app, s.appURL+"/readyz")

	generate(t, dir+"/rules.yml", "-prefix", "payments", "-job", "payments", "-speedup", fmt.Sprint(speedup))
	generate(t, dir+"/alertmanager.yml", "-alertmanager", "-speedup", fmt.Sprint(speedup),
		"-pager-url", s.hooks.srv.URL+"/pager", "-chat-url", s.hooks.srv.URL+"/chat", "-default-url", s.hooks.srv.URL+"/default")
	am := startDaemon(t, "alertmanager", nil, alertmanagerBin, "--config.file="+dir+"/alertmanager.yml", "--storage.path="+dir+"/am",
		"--web.listen-address="+amAddr, "--cluster.listen-address=", "--log.level=warn")
	s.amURL = "http://" + amAddr
	waitHTTP(t, am, s.amURL+"/-/ready")
	writeFile(t, dir, "prometheus.yml", fmt.Sprintf(prometheusConfig, amAddr, appAddr))
	prom := startDaemon(t, "prometheus", nil, prometheusBin, "--config.file="+dir+"/prometheus.yml", "--storage.tsdb.path="+dir+"/prom",
		"--web.listen-address="+promAddr, "--rules.alert.resend-delay=1s", "--log.level=warn")
	s.prom = promAPI{base: "http://" + promAddr}
	waitHTTP(t, prom, s.prom.base+"/-/ready")

	ctx, stopTraffic := context.WithCancel(context.Background())
	var traffic sync.WaitGroup
	traffic.Add(1)
	go func() { defer traffic.Done(); s.normalTraffic(ctx) }()
	defer func() { stopTraffic(); traffic.Wait() }()

	runStart := time.Now()
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"normal traffic raises no alert", s.quiet},
		{"conflicts and replays raise no alert", s.conflicts},
		{"rate limiting", s.rateLimiting},
		{"lock timeouts", s.lockTimeouts},
		{"dead letters", s.deadLetters},
		{"trace export failing", s.traceExportFailing},
		{"redis killed and restarted", s.redisKilled},
		{"a second short outage pages again", s.secondShortOutage},
		{"redis frozen", s.redisFrozen},
		{"target stops answering", s.targetDown},
		{"an alert without severity reaches the default receiver", s.defaultRoute},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.run) {
			t.Logf("step %q failed; firing now: %v", st.name, s.prom.firing(t))
		}
	}
	stopTraffic()
	traffic.Wait()

	t.Run("every firing notification reached the receivers of its severity", func(t *testing.T) { s.routing(t, runStart) })
	t.Run("every documented span arrives with its attributes and parent", s.spans)
	t.Run("no secret in any span or log", s.noSecrets)
	t.Run("no card number in any span or log", s.noCardNumbers)
	s.report(t)
}

// ---- traffic ----

// client is the HTTP client of the run: a frozen process or Redis must not
// hang it.
var client = &http.Client{Timeout: 3 * time.Second}

func (s *stack) do(method, path, key, ip, body string) (int, string) {
	req, _ := http.NewRequest(method, s.appURL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if ip != "" {
		req.Header.Set("X-Forwarded-For", ip)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	r, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

var keySeq atomic.Int64

func newKey(kind string) string { return fmt.Sprintf("%s-%d", kind, keySeq.Add(1)) }

func payment(card string) string {
	return `{"amount":1250,"currency":"EUR","card":"` + card + `"}`
}

// normalTraffic pays and reads back, about ten payments a second from 50
// clients (addresses of the documentation range, passed as
// X-Forwarded-For), each payment read ten times: well under the rate
// limit, with a cache hit rate of about 90 %.
func (s *stack) normalTraffic(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		ip := fmt.Sprintf("198.51.100.%d", i%50+1)
		status, body := s.do(http.MethodPost, "/payments", newKey("normal"), ip, payment(cardOK))
		if status == http.StatusCreated {
			var p struct{ ID string }
			_ = json.Unmarshal([]byte(body), &p)
			for range 10 {
				s.do(http.MethodGet, "/payments/"+p.ID, "", ip, "")
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // the traffic's pace
		}
	}
}

// during runs f in a loop, at the given pace, until the returned stop is called.
func during(pace time.Duration, f func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			go f()
			select {
			case <-ctx.Done():
			case <-time.After(pace): // the load's pace
			}
		}
	}()
	return func() { cancel(); wg.Wait(); time.Sleep(client.Timeout) } // the last requests end within the client timeout
}

// ---- waiting and measuring ----

// waitFor polls cond every 100ms until it holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(100 * time.Millisecond) // polling Prometheus and the webhooks
	}
	return time.Now()
}

func alert(name string) metricsfx.Alert {
	for _, a := range metricsfx.Alerts {
		if a.Name == name {
			return a
		}
	}
	panic("no alert " + name)
}

func sped(d string) time.Duration {
	v, err := time.ParseDuration(d)
	if err != nil {
		panic(err)
	}
	return v / speedup
}

// receiversOf are the receivers an alert of this severity must reach.
func receiversOf(severity string) []string {
	if severity == "critical" {
		return []string{"pager", "chat"}
	}
	return []string{"chat"}
}

// groupInterval of the route that notifies receiver, sped up.
func groupInterval(receiver string) time.Duration {
	if receiver == "pager" {
		return metricsfx.PagerGroupInterval / speedup
	}
	return metricsfx.ChatGroupInterval / speedup
}

// Bounds of the measured times, from the rule and the routing: the rate
// window (5m, sped up: 5s), For, a scrape and an evaluation (1s each), the
// route's group_wait and group_interval, keep_firing_for, and slack for a
// loaded machine. extra covers what precedes the series (the stream
// backlog is read every 5s).
const slack = 8 * time.Second

func fireBound(a metricsfx.Alert, extra time.Duration) time.Duration {
	return sped("5m") + sped(a.For) + 2*time.Second + extra + slack
}

func resolveBound(a metricsfx.Alert, extra time.Duration) time.Duration {
	keep := time.Duration(0)
	if a.KeepFiringFor != "" {
		keep = sped(a.KeepFiringFor)
	}
	return sped("5m") + keep + 2*time.Second + metricsfx.ChatGroupInterval/speedup + extra + slack
}

// fired waits until alert name fires after fault and reaches every
// receiver of its severity; it records the times.
func (s *stack) fired(t *testing.T, scenario, name string, fault time.Time, extra time.Duration) *timing {
	t.Helper()
	return s.firedAt(t, scenario, name, fault, extra, receiversOf(alert(name).Severity))
}

// firedAt is fired for the given receivers only.
func (s *stack) firedAt(t *testing.T, scenario, name string, fault time.Time, extra time.Duration, receivers []string) *timing {
	t.Helper()
	a := alert(name)
	bound := fireBound(a, extra)
	firing := waitFor(t, bound, name+" firing in Prometheus", func() bool { return s.prom.alertState(t, name) == "firing" })
	tm := timing{Alert: name, Severity: a.Severity, Scenario: scenario, Firing: firing.Sub(fault)}
	for _, rcv := range receivers {
		at := waitFor(t, bound+metricsfx.ChatGroupWait/speedup+groupInterval(rcv)+slack, name+" notified to "+rcv, func() bool {
			_, ok := s.hooks.find(rcv, name, "firing", fault)
			return ok
		})
		tm.Receivers = append(tm.Receivers, rcv)
		if first, ok := s.hooks.find(rcv, name, "firing", fault); ok && (tm.Notified == 0 || first.At.Sub(fault) < tm.Notified) {
			tm.Notified = first.At.Sub(fault)
		} else if !ok {
			tm.Notified = at.Sub(fault)
		}
	}
	s.timings = append(s.timings, &tm)
	return &tm
}

// resolved waits for the resolved notification of tm's alert after fix at
// its first receiver, and records the time.
func (s *stack) resolved(t *testing.T, tm *timing, fix time.Time, extra time.Duration) {
	t.Helper()
	a := alert(tm.Alert)
	at := waitFor(t, resolveBound(a, extra), tm.Alert+" resolved at "+tm.Receivers[0], func() bool {
		_, ok := s.hooks.find(tm.Receivers[0], tm.Alert, "resolved", fix)
		return ok
	})
	tm.Resolved = at.Sub(fix)
}

// settle waits until nothing fires or is pending, so that one scenario's
// alerts do not stand in for the next one's.
func (s *stack) settle(t *testing.T) {
	t.Helper()
	waitFor(t, 90*time.Second, "no alert pending or firing", func() bool {
		var body struct {
			Data struct {
				Alerts []any `json:"alerts"`
			} `json:"data"`
		}
		s.prom.get(t, "/api/v1/alerts", &body)
		return len(body.Data.Alerts) == 0
	})
}

// ---- scenarios ----

// Ten seconds of ordinary traffic: Prometheus scrapes the app, every
// series the rules read exists, and nothing is pending or firing.
func (s *stack) quiet(t *testing.T) {
	waitFor(t, 30*time.Second, "Prometheus scraping the app", func() bool { return s.prom.query(t, `up{job="payments"}`) == "1" })
	waitFor(t, 30*time.Second, "payments flowing", func() bool {
		v, err := strconv.ParseFloat(s.prom.query(t, `sum(rate(payments_idempotency_requests_total{outcome="new"}[5s]))`), 64)
		return err == nil && v > 0
	})
	time.Sleep(10 * time.Second) // the quiet period under test
	if f := s.prom.firing(t); len(f) > 0 {
		t.Fatalf("alerts firing under normal traffic: %v", f)
	}
	for _, m := range []string{"store_up", "commands_total", "errors_total", "idempotency_requests_total", "http_requests_total",
		"lock_acquisitions_total", "lock_timeouts_total", "lock_wait_seconds_bucket", "cache_hits_total", "cache_misses_total",
		"ratelimit_allowed_total", "ratelimit_rejected_total", "stream_length", "stream_consumer_lag", "tracing_export_errors_total"} {
		if s.prom.query(t, "count(payments_"+m+")") == "" {
			t.Errorf("Prometheus has no payments_%s series", m)
		}
	}
}

// A reused key with another body (422) and replays: client errors, which
// page nobody.
func (s *stack) conflicts(t *testing.T) {
	since := time.Now()
	for i := range 20 {
		key := newKey("conflict")
		ip := fmt.Sprintf("198.51.100.%d", 100+i)
		if st, _ := s.do(http.MethodPost, "/payments", key, ip, payment(cardOK)); st != http.StatusCreated {
			t.Fatalf("first payment: %d", st)
		}
		if st, _ := s.do(http.MethodPost, "/payments", key, ip, payment(cardOK)); st != http.StatusCreated {
			t.Fatalf("replay: %d", st)
		}
		if st, _ := s.do(http.MethodPost, "/payments", key, ip, `{"amount":1,"currency":"EUR","card":"`+cardOK+`"}`); st != http.StatusUnprocessableEntity {
			t.Fatalf("reused key: %d", st)
		}
	}
	time.Sleep(8 * time.Second) // long enough for a 5s window and a For of a few seconds
	if n := s.hooks.received(since); len(n) > 0 {
		t.Fatalf("conflicts notified %v", n)
	}
}

// One client sends far past its limit (20 per 5s): most of the traffic is
// rejected, both rejection alerts fire, and resolve once it stops.
func (s *stack) rateLimiting(t *testing.T) {
	s.settle(t)
	fault := time.Now()
	stop := during(25*time.Millisecond, func() {
		s.do(http.MethodPost, "/payments", newKey("hot"), "198.51.100.250", payment(cardOK))
	})
	crit := s.fired(t, "rate limiting", "RateLimitRejectionCritical", fault, 0)
	high := s.fired(t, "rate limiting", "RateLimitRejectionHigh", fault, 0)
	stop()
	fix := time.Now()
	s.resolved(t, crit, fix, 0)
	s.resolved(t, high, fix, 0)
}

// Another process holds a card's lock: every payment with that card waits
// PAYMENTS_LOCK_WAIT and gives up (503 card_busy). A third of the
// acquisitions that end time out: both lock-timeout alerts fire.
func (s *stack) lockTimeouts(t *testing.T) {
	s.settle(t)
	ctx := context.Background()
	lockKey := "lock:{card:" + cardBusy + "}"
	if err := s.rdb.Set(ctx, lockKey, "another-process", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	fault := time.Now()
	stop := during(100*time.Millisecond, func() {
		s.do(http.MethodPost, "/payments", newKey("busy"), fmt.Sprintf("198.51.100.%d", 150+keySeq.Load()%50), payment(cardBusy))
	})
	crit := s.fired(t, "lock timeouts", "LockTimeoutRateCritical", fault, 0)
	high := s.fired(t, "lock timeouts", "LockTimeoutRateHigh", fault, 0)
	stop()
	s.rdb.Del(ctx, lockKey)
	fix := time.Now()
	s.resolved(t, crit, fix, 0)
	s.resolved(t, high, fix, 0)
}

// A malformed payment.created event fails the receipt handler MaxAttempts
// times and moves to payment.created:dlq: DLQNotEmpty fires (counted from
// the moment the dead letter exists), and resolves when the operator
// empties the dead-letter stream.
func (s *stack) deadLetters(t *testing.T) {
	s.settle(t)
	ctx := context.Background()
	if err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "payment.created", Values: []any{"data", "not json"}}).Err(); err != nil {
		t.Fatal(err)
	}
	fault := waitFor(t, 60*time.Second, "the malformed event dead-lettered", func() bool {
		return s.rdb.XLen(ctx, "payment.created:dlq").Val() > 0
	})
	backlog := 5 * time.Second // streamfx reads the backlog every 5s
	tm := s.fired(t, "dead letters", "DLQNotEmpty", fault, backlog)
	s.rdb.Del(ctx, "payment.created:dlq")
	s.resolved(t, tm, time.Now(), backlog)
}

// The trace backend answers 500 to every export: the SDK's errors are
// counted, and TraceExportFailing fires after its 15 minutes (15s here).
func (s *stack) traceExportFailing(t *testing.T) {
	s.settle(t)
	s.traces.setRefusing(true)
	fault := time.Now()
	tm := s.fired(t, "trace backend failing", "TraceExportFailing", fault, 0)
	s.traces.setRefusing(false)
	s.resolved(t, tm, time.Now(), 0)
}

// Redis is killed under traffic and restarted (empty, as after a crash
// without persistence): StoreConnectionLost pages, so do the idempotency
// store errors; all resolve after the restart.
func (s *stack) redisKilled(t *testing.T) {
	s.settle(t)
	fault := time.Now()
	s.redis.Kill()
	lost := s.fired(t, "redis killed", "StoreConnectionLost", fault, 0)
	storeErr := s.fired(t, "redis killed", "IdempotencyStoreErrorsCritical", fault, 0)
	redisErr := s.fired(t, "redis killed", "RedisErrorRateHigh", fault, 0)
	if st, _ := s.do(http.MethodGet, "/readyz", "", "", ""); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz with Redis down: %d", st)
	}
	s.redis.Restart()
	fix := time.Now()
	s.resolved(t, lost, fix, 0)
	s.resolved(t, storeErr, fix, 0)
	s.resolved(t, redisErr, fix, 0)
}

// Right after the first outage resolved, a second one, just long enough to
// fire: the pager hears of it too (it once merged into the first group and
// was never sent). Only the pager is promised (docs/monitoring.md): the
// chat route's group_interval (5m) is longer than keep_firing_for (2m), so
// an episode this short may fire and clear between two of its flushes.
func (s *stack) secondShortOutage(t *testing.T) {
	fault := time.Now()
	s.redis.Kill()
	waitFor(t, fireBound(alert("StoreConnectionLost"), 0), "StoreConnectionLost firing again", func() bool {
		return s.prom.alertState(t, "StoreConnectionLost") == "firing"
	})
	s.redis.Restart() // at once: the outage is as short as an outage that fires can be
	tm := s.firedAt(t, "second short outage", "StoreConnectionLost", fault, 0, []string{"pager"})
	s.resolved(t, tm, time.Now(), 0)
}

// slowestAnswer samples /metrics and /readyz 20 times each and returns the
// slowest answer and the last /readyz status.
func (s *stack) slowestAnswer() (time.Duration, int) {
	var slowest time.Duration
	var readyz int
	for range 20 {
		for _, path := range []string{"/metrics", "/readyz"} {
			began := time.Now()
			st, _ := s.do(http.MethodGet, path, "", "", "")
			slowest = max(slowest, time.Since(began))
			if path == "/readyz" {
				readyz = st
			}
		}
		time.Sleep(100 * time.Millisecond) // sampling the endpoints over two seconds
	}
	return slowest, readyz
}

// The connection to Redis freezes (bytes held both ways, nothing closed):
// /metrics and /readyz answer no slower than with Redis healthy, far
// inside the 1s scrape timeout, so Prometheus keeps scraping (up stays 1),
// store_up turns 0 and StoreConnectionLost pages; thawed, it resolves.
// (The 50ms bound of the cached health check itself is asserted in
// process, without this run's load and race detector: storefx's
// TestStoreUp_FrozenOrPausedServer_ScrapeAndReadyAnswerAtOnce and the
// payments example's TestPayments_RedisFrozen_MetricsAndReadyzAnswerAtOnce.)
func (s *stack) redisFrozen(t *testing.T) {
	s.settle(t)
	healthy, _ := s.slowestAnswer()
	fault := time.Now()
	s.proxy.SetMode(faultproxy.Freeze)
	defer s.proxy.SetMode(faultproxy.Forward)
	frozen, readyz := s.slowestAnswer()
	t.Logf("slowest of 20 /metrics and 20 /readyz answers: %v with Redis healthy, %v with Redis frozen", healthy, frozen)
	if frozen > 500*time.Millisecond {
		t.Errorf("/metrics or /readyz took %v with Redis frozen (bound: half the 1s scrape timeout)", frozen)
	}
	if readyz != http.StatusServiceUnavailable {
		t.Errorf("/readyz with Redis frozen: %d", readyz)
	}
	tm := s.fired(t, "redis frozen", "StoreConnectionLost", fault, 0)
	since := time.Since(fault).Round(time.Second) + time.Second
	if up := s.prom.query(t, fmt.Sprintf(`min_over_time(up{job="payments"}[%v])`, since)); up != "1" {
		t.Errorf("min of up over the %v of the freeze = %q: a scrape failed", since, up)
	}
	s.proxy.SetMode(faultproxy.Forward)
	s.resolved(t, tm, time.Now(), 0)
}

// The process stops answering (SIGSTOP: a hung process): every scrape
// times out, TargetDown pages; SIGCONT and it resolves.
func (s *stack) targetDown(t *testing.T) {
	s.settle(t)
	fault := time.Now()
	if err := s.app.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	tm := s.fired(t, "process hung", "TargetDown", fault, 0)
	if err := s.app.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.resolved(t, tm, time.Now(), 0)
}

// An alert with no severity goes to the default receiver.
func (s *stack) defaultRoute(t *testing.T) {
	since := time.Now()
	body := `[{"labels":{"alertname":"E2ERoutingProbe","severity":"info"}}]`
	r, err := http.Post(s.amURL+"/api/v2/alerts", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	waitFor(t, 30*time.Second, "the probe at the default receiver", func() bool {
		_, ok := s.hooks.find("default", "E2ERoutingProbe", "firing", since)
		return ok
	})
	if got := s.hooks.received(since)["E2ERoutingProbe"]; len(got) != 1 {
		t.Errorf("the info alert reached %v, want only default", got)
	}
}

// ---- what the whole run shows ----

// Every firing notification of the run went exactly to the receivers of
// its alert's severity.
func (s *stack) routing(t *testing.T, since time.Time) {
	for name, got := range s.hooks.received(since) {
		if name == "E2ERoutingProbe" {
			continue
		}
		want := receiversOf(alert(name).Severity)
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s (%s) reached %v, want %v", name, alert(name).Severity, got, want)
		}
	}
}

// The span catalogue, as the trace backend received it: names, kinds,
// attributes, events, status, and who is whose parent.
func (s *stack) spans(t *testing.T) {
	all := s.traces.all()
	if len(all) == 0 {
		t.Fatal("the trace backend received no span")
	}
	byID := map[string]span{}
	for _, sp := range all {
		byID[sp.SpanID] = sp
	}
	parentName := func(sp span) string { return byID[sp.ParentID].Name }
	find := func(what string, ok func(span) bool) (span, bool) {
		for _, sp := range all {
			if ok(sp) {
				return sp, true
			}
		}
		t.Errorf("no span: %s", what)
		return span{}, false
	}
	has := func(sp span, attrs ...string) {
		t.Helper()
		for _, a := range attrs {
			k, v, exact := strings.Cut(a, "=")
			got, ok := sp.Attrs[k]
			if !ok || (exact && got != v) {
				t.Errorf("%s (%s): attribute %s is %q (present %v)", sp.Name, sp.Kind, a, got, ok)
			}
		}
	}
	events := func(sp span, names ...string) {
		t.Helper()
		for _, n := range names {
			if !contains(sp.Events, n) {
				t.Errorf("%s: no event %s (events %v)", sp.Name, n, sp.Events)
			}
		}
	}

	// A payment: the SERVER span, and under it the idempotency round trips,
	// the rate-limit check, the card lock, the charge and the publish.
	server, ok := find("POST /payments SERVER span of a new payment", func(sp span) bool {
		return sp.Name == "POST /payments" && sp.Kind == "SERVER" && sp.Attrs["redisfx.idempotency.outcome"] == "new" &&
			sp.Attrs["http.response.status_code"] == "201"
	})
	if !ok {
		return
	}
	has(server, "http.route=/payments", "http.request.method=POST")
	if server.Resource["service.name"] != "payments" {
		t.Errorf("service.name %q", server.Resource["service.name"])
	}
	children := map[string][]span{}
	for _, sp := range all {
		if sp.TraceID == server.TraceID && sp.ParentID == server.SpanID {
			children[sp.Name] = append(children[sp.Name], sp)
		}
	}
	for name, n := range map[string]int{"redis.EVALSHA": 2, "rate_limit.check": 1, "lock.acquire": 1, "lock.release": 1, "payment.charge": 1, "stream.publish": 1} {
		if len(children[name]) != n {
			t.Errorf("children of the SERVER span: %d %s, want %d (children: %v)", len(children[name]), name, n, keys(children))
		}
	}
	for _, c := range children["redis.EVALSHA"] {
		has(c, "db.system=redis", "redisfx.client=default", "db.statement", "redisfx.duration_ms")
		if c.Kind != "CLIENT" {
			t.Errorf("redis.EVALSHA kind %s", c.Kind)
		}
	}
	if c := children["rate_limit.check"]; len(c) == 1 {
		has(c[0], "redisfx.plugin=rate-limit", "redisfx.rate_limit.key", "redisfx.rate_limit.limit=20", "redisfx.rate_limit.window=5",
			"redisfx.rate_limit.current", "redisfx.rate_limit.remaining", "redisfx.rate_limit.allowed=true", "db.operation", "redisfx.duration_ms")
		events(c[0], "request.allowed")
		if k := c[0].Attrs["redisfx.rate_limit.key"]; !strings.HasSuffix(k, ":[redacted]") {
			t.Errorf("rate_limit.check redisfx.rate_limit.key=%q, want the client's address redacted", k)
		}
	}
	if c := children["lock.acquire"]; len(c) == 1 {
		has(c[0], "redisfx.plugin=locks", "redisfx.lock.key", "redisfx.lock.ttl=10000", "redisfx.lock.acquired=true", "redisfx.lock.retry_count", "db.operation=SET")
		events(c[0], "lock.acquired")
		if k := c[0].Attrs["redisfx.lock.key"]; !strings.HasPrefix(k, "hmac-sha256:") {
			t.Errorf("lock.acquire redisfx.lock.key=%q, want the keyed digest of the card's lock name", k)
		}
	}
	if c := children["lock.release"]; len(c) == 1 {
		has(c[0], "redisfx.lock.key")
		events(c[0], "lock.released")
	}
	if c := children["payment.charge"]; len(c) == 1 {
		has(c[0], "payment.id", "payment.amount=1250", "payment.currency=EUR")
	}
	var publish span
	if c := children["stream.publish"]; len(c) == 1 {
		publish = c[0]
		has(publish, "stream=payment.created", "message_id", "message_size")
		events(publish, "message.published")
		if publish.Kind != "PRODUCER" {
			t.Errorf("stream.publish kind %s", publish.Kind)
		}
	}

	// The receipt consumer joins the payment's trace, under the publish.
	if publish.SpanID != "" {
		if consume, ok := find("stream.consume under the payment's stream.publish", func(sp span) bool {
			return sp.Name == "stream.consume" && sp.ParentID == publish.SpanID && sp.TraceID == server.TraceID
		}); ok {
			has(consume, "stream=payment.created", "group=payments", "consumer", "message_id="+publish.Attrs["message_id"])
			events(consume, "message.received", "message.processed")
			if consume.Kind != "CONSUMER" {
				t.Errorf("stream.consume kind %s", consume.Kind)
			}
			if ack, ok := find("stream.ack of the receipt", func(sp span) bool { return sp.Name == "stream.ack" && sp.ParentID == consume.SpanID }); ok {
				events(ack, "message.acknowledged")
			}
		}
	}

	// A read through the cache.
	if get, ok := find("cache.get under GET /payments/{id}", func(sp span) bool {
		return sp.Name == "cache.get" && parentName(sp) == "GET /payments/{id}"
	}); ok {
		has(get, "redisfx.plugin=cache", "redisfx.cache.namespace=payments", "redisfx.cache.key", "redisfx.cache.hit", "db.operation=GET")
		if !contains(get.Events, "cache.hit") && !contains(get.Events, "cache.miss") {
			t.Errorf("cache.get events %v", get.Events)
		}
	}

	// The failures the scenarios caused, each on its span.
	if rl, ok := find("a blocked rate_limit.check", func(sp span) bool {
		return sp.Name == "rate_limit.check" && sp.Attrs["redisfx.rate_limit.allowed"] == "false"
	}); ok {
		events(rl, "request.blocked")
		if rl.Status != "ERROR" || rl.StatusMessage != "Rate limit exceeded" {
			t.Errorf("blocked rate_limit.check status %s %q", rl.Status, rl.StatusMessage)
		}
	}
	if lk, ok := find("a timed-out lock.acquire", func(sp span) bool {
		return sp.Name == "lock.acquire" && sp.Attrs["redisfx.lock.acquired"] == "false"
	}); ok {
		events(lk, "lock.retry", "lock.timeout")
		if lk.Status != "ERROR" || lk.StatusMessage != "Failed to acquire lock" {
			t.Errorf("timed-out lock.acquire status %s %q", lk.Status, lk.StatusMessage)
		}
		if parentName(lk) != "POST /payments" {
			t.Errorf("timed-out lock.acquire parent %q", parentName(lk))
		}
	}
	if dlq, ok := find("stream.move_to_dlq", func(sp span) bool { return sp.Name == "stream.move_to_dlq" }); ok {
		has(dlq, "dlq_stream=payment.created:dlq", "reason=MaxRetriesExceeded")
		events(dlq, "message.moved_to_dlq")
	}
	if failed, ok := find("stream.consume of the malformed event", func(sp span) bool {
		return sp.Name == "stream.consume" && contains(sp.Events, "processing.failed")
	}); ok && failed.Status != "ERROR" {
		t.Errorf("failed stream.consume status %s", failed.Status)
	}
	if _, ok := find("a replayed payment", func(sp span) bool {
		return sp.Name == "POST /payments" && sp.Attrs["redisfx.idempotency.outcome"] == "replay"
	}); !ok {
		return
	}
	find("a reused key", func(sp span) bool {
		return sp.Name == "POST /payments" && sp.Attrs["redisfx.idempotency.outcome"] == "mismatch" && sp.Attrs["http.response.status_code"] == "422"
	})
}

func keys(m map[string][]span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// everything is every text the run produced that a person or a backend
// could read: each span's name, attributes, event attributes and resource,
// and the app's whole log.
func (s *stack) everything() map[string]string {
	if s.texts != nil {
		return s.texts
	}
	out := map[string]string{"log": s.app.out.String()}
	for i, sp := range s.traces.all() {
		where := fmt.Sprintf("span %d %s", i, sp.Name)
		var b strings.Builder
		b.WriteString(sp.Name + " " + sp.StatusMessage)
		for k, v := range sp.Attrs {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
		for k, v := range sp.Resource {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
		b.WriteString(" " + strings.Join(sp.EventAttrs, " "))
		out[where] = b.String()
	}
	s.texts = out
	return out
}

// The Redis password and the exporter's token were configured (the
// backend received the token), yet neither reaches a span or the log.
func (s *stack) noSecrets(t *testing.T) {
	sent := false
	for _, h := range s.traces.received() {
		sent = sent || h.Get("Authorization") == "Bearer "+exporterToken
	}
	if !sent {
		t.Error("the exporter never sent its authorization header: the secret was not configured")
	}
	for where, text := range s.everything() {
		for _, secret := range []string{redisPassword, exporterToken} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds a secret: %s", where, excerpt(text, secret))
			}
		}
	}
}

// No card number the run paid with appears in a span or the log (a pattern
// of 13 to 19 digits would also match stream entry ids, which are
// millisecond timestamps). See cardRedactionLanded.
func (s *stack) noCardNumbers(t *testing.T) {
	var leaks []string
	for where, text := range s.everything() {
		for _, c := range []string{cardOK, cardBusy} {
			if strings.Contains(text, c) {
				leaks = append(leaks, where+": "+excerpt(text, c))
			}
		}
	}
	sort.Strings(leaks)
	switch {
	case cardRedactionLanded && len(leaks) > 0:
		t.Errorf("%d places hold a card number, e.g.:\n%s", len(leaks), strings.Join(leaks[:min(len(leaks), 10)], "\n"))
	case !cardRedactionLanded && len(leaks) > 0:
		t.Logf("KNOWN FAILURE (issue 19, item 1: card redaction has not landed): %d places hold a card number, e.g.:\n%s\n"+
			"This assertion fails the run once cardRedactionLanded is true.", len(leaks), strings.Join(leaks[:min(len(leaks), 10)], "\n"))
	case !cardRedactionLanded:
		t.Error("no card number in any span or log: redaction has landed; set cardRedactionLanded = true in e2e/observability so this assertion guards it")
	}
}

func excerpt(text, s string) string {
	i := strings.Index(text, s)
	from, to := max(i-60, 0), min(i+len(s)+20, len(text))
	return strings.ReplaceAll(text[from:to], "\n", " ")
}

// report prints the measured times as a Markdown table (the one in
// docs/monitoring.md), and writes it to $REDISFX_E2E_REPORT if set.
func (s *stack) report(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "| Alert | Severity | Scenario | Receivers | Fault → firing | Fault → notified | Fix → resolved |\n|---|---|---|---|---|---|---|\n")
	for _, tm := range s.timings {
		res := "—"
		if tm.Resolved > 0 {
			res = tm.Resolved.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %v | %v | %s |\n", tm.Alert, tm.Severity, tm.Scenario, strings.Join(tm.Receivers, ", "),
			tm.Firing.Round(100*time.Millisecond), tm.Notified.Round(100*time.Millisecond), res)
	}
	t.Logf("measured with every duration divided by %d:\n%s", speedup, b.String())
	if p := os.Getenv("REDISFX_E2E_REPORT"); p != "" {
		_ = os.WriteFile(p, []byte(b.String()), 0o644)
	}
}
