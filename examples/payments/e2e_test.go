package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/tracingfx"
)

// The payments contract, checked as a client sees it: the real binary, a
// real redis-server, HTTP on loopback.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "payments-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "payments")
	if out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building payments: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// proc is a running payments process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	stdout *syncBuf
	stderr *syncBuf
	exited chan error
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, env ...string) *proc {
	t.Helper()
	p := &proc{t: t, stdout: &syncBuf{}, stderr: &syncBuf{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(binary)
	p.cmd.Env = append(os.Environ(), append([]string{"HTTP_ADDR=127.0.0.1:0", "REDIS_URL="}, env...)...)
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("stderr:\n%s", p.stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for p.url == "" {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("payments exited at start: %v\n%s", err, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("payments did not listen in 30s:\n%s", p.stderr.String())
		}
		for _, l := range logLines(p.stderr.String()) {
			if l["msg"] == "http server listening" {
				p.url = "http://" + l["addr"].(string)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p
}

func logLines(s string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (p *proc) do(method, path, key, body string) resp {
	p.t.Helper()
	req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return resp{r.StatusCode, r.Header, string(b)}
}

func (p *proc) pay(key, body string) resp { return p.do(http.MethodPost, "/payments", key, body) }

func (p *proc) executions() []Payment {
	p.t.Helper()
	var list []Payment
	if err := json.Unmarshal([]byte(p.do(http.MethodGet, "/payments", "", "").body), &list); err != nil {
		p.t.Fatal(err)
	}
	return list
}

func problem(t *testing.T, r resp, status int, code string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Fatal("problem without Cache-Control: no-store")
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"type", "title", "status", "detail", "code"} {
		if _, ok := m[f]; !ok {
			t.Fatalf("problem lacks %q: %s", f, r.body)
		}
	}
	if code != "" && m["code"] != code {
		t.Fatalf("code %v, want %s", m["code"], code)
	}
	if status == http.StatusConflict && r.header.Get("Retry-After") == "" {
		t.Fatal("409 without Retry-After")
	}
	return m
}

const card = `{"amount":1250,"currency":"EUR","card":"4242424242424242"}`

func TestPayments_ReplayDeclinedInvalidMismatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t))

	first := p.pay("order-1", card)
	var pay Payment
	_ = json.Unmarshal([]byte(first.body), &pay)
	if first.status != 201 || pay.Status != "succeeded" || !strings.HasPrefix(pay.ID, "pay_") || pay.Amount != 1250 || pay.Currency != "EUR" {
		t.Fatalf("first payment: %+v", first)
	}
	if first.header.Get("Location") != "/payments/"+pay.ID {
		t.Fatalf("Location %q", first.header.Get("Location"))
	}
	again := p.pay("order-1", card)
	if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay: %+v", again)
	}
	if got := p.do("GET", "/payments/"+pay.ID, "", ""); got.status != 200 || !strings.Contains(got.body, pay.ID) {
		t.Fatalf("GET /payments/{id}: %+v", got)
	}
	problem(t, p.do("GET", "/payments/pay_nope", "", ""), 404, "")

	declined := p.pay("order-2", `{"amount":500,"currency":"USD","card":"4000000000000002"}`)
	if declined.status != 402 || !strings.Contains(declined.body, `"status":"declined"`) {
		t.Fatalf("declined: %+v", declined)
	}
	if r := p.pay("order-2", `{"amount":500,"currency":"USD","card":"4000000000000002"}`); r.status != 402 || r.body != declined.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("declined replay: %+v", r)
	}

	invalid := p.pay("order-3", `{"amount":-5,"currency":"EUR","card":"42"}`)
	problem(t, invalid, 400, "")
	if r := p.pay("order-3", `{"amount":-5,"currency":"EUR","card":"42"}`); r.status != 400 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("invalid body not replayed: %+v", r)
	}

	problem(t, p.pay("order-1", `{"amount":9999,"currency":"EUR","card":"4242424242424242"}`), 422, "idempotency_key_reused")

	if n := len(p.executions()); n != 3 {
		t.Fatalf("%d executions, want 3 (one per key)", n)
	}
}

func TestPayments_ProcessorFailure_409UntilFailedRecordExpires(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t), "IDEMPOTENCY_LOCK_TIMEOUT=400ms")
	body := `{"amount":100,"currency":"EUR","card":"4000000000000119"}`
	problem(t, p.pay("boom", body), 500, "")
	problem(t, p.pay("boom", body), 409, "idempotency_previous_failed")
	deadline := time.Now().Add(10 * time.Second)
	for p.pay("boom", body).status == 409 {
		if time.Now().After(deadline) {
			t.Fatal("failed record never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	list := p.executions()
	if len(list) != 2 || list[0].Status != "failed" {
		t.Fatalf("executions %+v, want 2 failed attempts (one before, one after expiry)", list)
	}
}

func TestPayments_InProgressPastWaitTimeout_409(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+prefix,
		"PAYMENTS_DELAY=1500ms", "IDEMPOTENCY_WAIT_TIMEOUT=100ms")
	done := make(chan resp)
	go func() { done <- p.pay("slow", card) }()
	inProgress(t, srv, prefix+"slow") // the first request is inside its 1.5s delay
	problem(t, p.pay("slow", card), 409, "idempotency_request_in_progress")
	if r := <-done; r.status != 201 {
		t.Fatalf("first: %+v", r)
	}
}

func TestPayments_KeyMalformedOrTooLong_400(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL())
	problem(t, p.pay(strings.Repeat("k", 256), card), 400, "idempotency_key_invalid")
	problem(t, p.pay("has space", card), 400, "idempotency_key_invalid")
	if len(p.executions()) != 0 {
		t.Fatal("handler ran for an invalid key")
	}
	if r := p.pay("", card); r.status != 201 {
		t.Fatalf("no key must pass through: %+v", r)
	}
}

func TestPayments_FiftyDuplicates_OneExecution(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t), "PAYMENTS_DELAY=200ms")
	var wg sync.WaitGroup
	bodies := make([]resp, 50)
	for i := range bodies {
		wg.Add(1)
		go func() { defer wg.Done(); bodies[i] = p.pay("dup", card) }()
	}
	wg.Wait()
	for i, r := range bodies {
		if r.status != 201 || r.body != bodies[0].body {
			t.Fatalf("reply %d differs: %+v vs %+v", i, r, bodies[0])
		}
	}
	if n := len(p.executions()); n != 1 {
		t.Fatalf("%d executions for 50 duplicates", n)
	}
}

func TestPayments_ConsoleSpansNestUnderServerSpan_AndMetrics(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t), "TRACING_EXPORTER=console", "METRICS_PREFIX=shop", "PAYMENTS_CARD_LOCK=on")
	r := p.pay("traced", card)
	var spans []tracingfx.ConsoleSpan
	deadline := time.Now().Add(5 * time.Second)
	var server, publish *tracingfx.ConsoleSpan
	// The outbox's relay ends stream.publish when it has appended the
	// event, a moment after the response (and the SERVER span) ended.
	for (server == nil || publish == nil) && time.Now().Before(deadline) {
		spans, server, publish = spans[:0], nil, nil
		sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
		for sc.Scan() {
			var s tracingfx.ConsoleSpan
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				t.Fatalf("stdout line is not a span: %q", sc.Text())
			}
			spans = append(spans, s)
		}
		for i := range spans {
			if spans[i].Name == "POST /payments" && spans[i].Kind == "SERVER" {
				server = &spans[i]
			}
		}
		for i := range spans {
			if server != nil && spans[i].Name == "stream.publish" && spans[i].TraceID == server.TraceID {
				publish = &spans[i]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if server == nil || publish == nil || r.status != 201 {
		t.Fatalf("no SERVER span for POST /payments, or no stream.publish in its trace, in %d spans", len(spans))
	}
	if server.Attributes["http.route"] != "/payments" {
		t.Fatalf("http.route %v", server.Attributes["http.route"])
	}
	children := map[string]int{}
	for _, s := range spans {
		if s.TraceID == server.TraceID && s.ParentSpanID == server.SpanID {
			children[s.Name]++
		}
	}
	if children["redis.EVALSHA"] != 2 || children["payment.charge"] != 1 || children["lock.acquire"] != 1 || children["lock.release"] != 1 || children["stream.publish"] != 1 {
		t.Fatalf("children of the SERVER span: %v, want 2 redis.EVALSHA (claim, complete), payment.charge, lock.acquire, lock.release, stream.publish", children)
	}
	// The receipt consumer's span joins the request's trace, under the publish.
	waitUntil(t, func() bool {
		for _, l := range strings.Split(p.stdout.String(), "\n") {
			var s tracingfx.ConsoleSpan
			if json.Unmarshal([]byte(l), &s) == nil && s.Name == "stream.consume" && s.Kind == "CONSUMER" && s.TraceID == server.TraceID && s.ParentSpanID == publish.SpanID {
				return true
			}
		}
		return false
	})
	metrics := p.do("GET", "/metrics", "", "").body
	for _, want := range []string{
		`shop_http_requests_total{code="201",method="POST",route="/payments"} 1`,
		`shop_idempotency_requests_total{outcome="new"} 1`,
		`shop_commands_total{command="EVALSHA"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestPayments_GracefulStop_FinishesInFlightAndRecordsIt(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+prefix, "PAYMENTS_DELAY=700ms", "TRACING_EXPORTER=console")
	done := make(chan resp)
	go func() { done <- p.pay("inflight", card) }()
	inProgress(t, srv, prefix+"inflight") // the handler is running
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if r := <-done; r.status != 201 {
		t.Fatalf("in-flight request during stop: %+v", r)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("exit: %v, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not exit after SIGTERM")
	}
	state := srv.Client().HGet(context.Background(), prefix+"inflight", "s").Val()
	if state != "c" {
		t.Fatalf("record state %q after graceful stop, want completed", state)
	}
	if !strings.Contains(p.stdout.String(), `"name":"POST /payments"`) {
		t.Fatal("the in-flight request's span was not flushed at stop")
	}
}

// A stop waits for a payment however long PAYMENTS_DELAY makes it: here
// longer than the 10 s an HTTP server drains by default. (Found by an
// adversary: with PAYMENTS_DELAY=20s the in-flight request got no answer,
// its record stayed in progress and the process exited 1.)
func TestPayments_GracefulStop_WaitsForAPaymentLongerThanTheDefaultDrain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+prefix, "PAYMENTS_DELAY=16s")
	done := make(chan resp)
	go func() { done <- p.pay("slow", card) }()
	inProgress(t, srv, prefix+"slow")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if r := <-done; r.status != 201 {
		t.Fatalf("in-flight 16 s payment during stop: %+v", r)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("exit: %v, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not exit after SIGTERM")
	}
	if state := srv.Client().HGet(context.Background(), prefix+"slow", "s").Val(); state != "c" {
		t.Fatalf("record state %q after the stop, want completed", state)
	}
}

func TestPayments_InvalidEnvStopsStartNamingTheVariable(t *testing.T) {
	t.Parallel()
	for _, env := range []string{"IDEMPOTENCY_ERROR_POLICY=sometimes", "IDEMPOTENCY_TTL=-1h", "REDIS_URL=http://nope", "TRACING_EXPORTER=pigeon", "PAYMENTS_DELAY=soon",
		"OTEL_TRACES_SAMPLER=sometimes", "OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318", "OTEL_PROPAGATORS=zipkin",
		"HTTP_ADDR=notanaddr", "HTTP_ADDR=127.0.0.1:99999", "REDIS_URL=redis://127.0.0.1:1/-1",
		"IDEMPOTENCY_TTL=500us", "IDEMPOTENCY_LOCK_TIMEOUT=5ms", "IDEMPOTENCY_LOCK_TIMEOUT=0", "IDEMPOTENCY_LOCK_TIMEOUT=0s", "IDEMPOTENCY_HEADER=Bad Header",
		// A host that does not resolve, or is not an address of this machine
		// (found by an adversary: exit 1, "cannot listen", no variable named).
		"HTTP_ADDR=nonexistent.invalid:7469", "HTTP_ADDR=256.1.1.1:7469", "HTTP_ADDR=192.0.2.1:7469",
		// Found by a second adversary: a link-local address without its
		// interface (exit 1, "bind: invalid argument"); durations whose sum
		// overflowed the server's timeouts (exit 2 naming httpfx's
		// Config.ShutdownTimeout, or a stop that failed); a user name
		// without a password (served as Redis's default user).
		"HTTP_ADDR=[fe80::1]:7469", "HTTP_ADDR=[fe80::1%nosuch]:7469",
		"PAYMENTS_DELAY=2562047h47m", "IDEMPOTENCY_WAIT_TIMEOUT=1500000h", "PAYMENTS_LOCK_WAIT=2562047h",
		"REDIS_URL=redis://nosuchuser@127.0.0.1:1/0"} {
		cmd := exec.Command(binary)
		cmd.Env = append(os.Environ(), "HTTP_ADDR=127.0.0.1:0", env)
		out, err := cmd.CombinedOutput()
		name := strings.SplitN(env, "=", 2)[0]
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), name) {
			t.Errorf("%s: exit %v (want 2, naming %s), output %s", env, err, name, out)
		}
		if strings.Contains(string(out), "http server listening") {
			t.Errorf("%s: served anyway", env)
		}
	}
}

// A REDIS_URL that Redis refuses at start (a database the server does not
// have, a wrong password, no password where one is required) is an invalid
// value like any other: start-up stops naming the variable, exit 2, and the
// password is not shown. (Found by an adversary: without the password,
// storefx names Config.Password and the example exited 1.)
func TestPayments_RedisURLRefusedByRedis_StopsNamingTheVariable(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t, redistest.WithArgs("--requirepass", "right-secret"))
	for _, url := range []string{
		"redis://:right-secret@" + srv.Addr() + "/16",
		"redis://:wrong-secret@" + srv.Addr() + "/0",
		"redis://" + srv.Addr() + "/0",
	} {
		cmd := exec.Command(binary)
		cmd.Env = append(os.Environ(), "HTTP_ADDR=127.0.0.1:0", "REDIS_URL="+url)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "invalid REDIS_URL") {
			t.Errorf("REDIS_URL=%s: exit %v (want 2, naming REDIS_URL), output %s", url, err, out)
		}
		if strings.Contains(string(out), "secret@") || strings.Contains(string(out), "wrong-secret") {
			t.Errorf("REDIS_URL=%s: the password is in the output: %s", url, out)
		}
		if strings.Contains(string(out), "http server listening") {
			t.Errorf("REDIS_URL=%s: served anyway", url)
		}
	}
}

func TestPayments_EmbeddedRedisWhenNoURL(t *testing.T) {
	t.Parallel()
	p := start(t, "IDEMPOTENCY_LOCK_TIMEOUT=300ms")
	if !strings.Contains(p.stderr.String(), "embedded in-memory Redis") {
		t.Fatal("no log line about the embedded Redis")
	}
	first := p.pay("e1", card)
	if r := p.pay("e1", card); r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay on the embedded Redis: %+v", r)
	}
	fail := `{"amount":1,"currency":"EUR","card":"4000000000000119"}`
	p.pay("e2", fail)
	problem(t, p.pay("e2", fail), 409, "idempotency_previous_failed")
	deadline := time.Now().Add(10 * time.Second) // expiry works on the embedded server too
	for p.pay("e2", fail).status == 409 {
		if time.Now().After(deadline) {
			t.Fatal("failed record never expired on the embedded Redis")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPayments_StoreDown_FailClosed500_Readyz503(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	p := start(t, "REDIS_URL="+srv.URL())
	if r := p.do("GET", "/readyz", "", ""); r.status != 200 {
		t.Fatalf("readyz %d", r.status)
	}
	srv.Kill()
	problem(t, p.pay("down", card), 500, "idempotency_store_unavailable")
	if r := p.do("GET", "/readyz", "", ""); r.status != 503 {
		t.Fatalf("readyz with Redis down: %d", r.status)
	}
	if r := p.do("GET", "/healthz", "", ""); r.status != 200 {
		t.Fatalf("healthz: %d", r.status)
	}
	if len(p.executions()) != 0 {
		t.Fatal("handler ran with the store down under fail-closed")
	}
}

// After real traffic, /metrics has every metric the library exports today,
// with the app's prefix and bounded labels.
func TestPayments_MetricsCatalogue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t), "PAYMENTS_DELAY=150ms")
	p.pay("m1", card)
	p.pay("m1", card)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ { // duplicates that wait
		wg.Add(1)
		go func() { defer wg.Done(); p.pay("m2", card) }()
	}
	wg.Wait()
	p.do("GET", "/no/such/route/123", "", "")
	metrics := p.do("GET", "/metrics", "", "").body
	for _, want := range []string{
		`payments_store_up{client="default"} 1`,
		`payments_commands_total{command="EVALSHA"}`,
		`payments_command_duration_seconds_bucket{command="EVALSHA",le=`,
		`payments_errors_total 0`,
		`payments_idempotency_requests_total{outcome="replay"} 1`,
		`payments_idempotency_requests_total{outcome="waited_replay"}`,
		`payments_idempotency_wait_seconds_count`,
		`payments_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`payments_http_request_duration_seconds_bucket{method="POST",route="/payments",le=`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, "/no/such/route") || strings.Contains(metrics, `"m1"`) {
		t.Error("a raw path or key reached a label")
	}
}

// inProgress waits until the record of key is in progress: its handler runs.
func inProgress(t *testing.T, srv *redistest.Server, key string) {
	t.Helper()
	rdb := srv.Client()
	deadline := time.Now().Add(20 * time.Second)
	for rdb.HGet(context.Background(), key, "s").Val() != "p" {
		if time.Now().After(deadline) {
			t.Fatalf("%s never in progress", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A payment body is one JSON object: data after it is a 400 (it was charged),
// trailing white space is not; a body over the handler's 64 KiB says so.
func TestPayments_BodyWithDataAfterTheObject_400(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := start(t, "REDIS_URL="+srv.URL(), "IDEMPOTENCY_KEY_PREFIX="+redistest.Prefix(t))
	for i, body := range []string{card + ` this is not json`, card + `{"a":1}`} {
		problem(t, p.pay(fmt.Sprint("trailing-", i), body), 400, "invalid_request")
	}
	if r := p.pay("trailing-space", card+" \n"); r.status != 201 {
		t.Fatalf("body with trailing white space: %d %s", r.status, r.body)
	}
	big := p.pay("big", `{"amount":1,"currency":"EUR","card":"4242","pad":"`+strings.Repeat("x", 100<<10)+`"}`)
	problem(t, big, 400, "invalid_request")
	if !strings.Contains(big.body, "64 KiB") {
		t.Fatalf("a body over 64 KiB: %s", big.body)
	}
	// Over the limit only by its trailing white space: still "too large",
	// not "data after the object" (found by an adversary).
	padded := p.pay("padded", card+strings.Repeat(" ", 64<<10))
	problem(t, padded, 400, "invalid_request")
	if !strings.Contains(padded.body, "64 KiB") {
		t.Fatalf("a body over 64 KiB by its trailing white space: %s", padded.body)
	}
}
