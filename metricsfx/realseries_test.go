package metricsfx_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/cachefx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/faultproxy"
	"github.com/redisfx/redisfx/internal/redistest"
	"github.com/redisfx/redisfx/lockfx"
	"github.com/redisfx/redisfx/metricsfx"
	"github.com/redisfx/redisfx/metricsfx/alerttest"
	"github.com/redisfx/redisfx/ratelimitfx"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

// The alert expressions, evaluated by promtool on the series that the real
// modules export under the condition each alert names (not on hand-written
// series): each module runs a scenario once against a real redis-server,
// its registry is gathered, and every counter is replayed as growing by
// that much each minute (gauges hold their value), for long enough to pass
// the alert's window and For.

const prefix = "payments"

func newMetrics(t *testing.T) *metricsfx.Metrics {
	t.Helper()
	m, err := metricsfx.New(metricsfx.Config{Prefix: prefix, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// inputSeries turns a gathered registry into promtool input series.
func inputSeries(t *testing.T, g prometheus.Gatherer) map[string]string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	name := func(n string, m *dto.Metric, extra ...string) string {
		var ls []string
		for _, lp := range m.Label {
			ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
		}
		ls = append(ls, extra...)
		return n + "{" + strings.Join(ls, ",") + "}"
	}
	counter := func(v float64) string { return fmt.Sprintf("0+%gx40", v) }
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			switch {
			case m.Counter != nil:
				out[name(mf.GetName(), m)] = counter(m.Counter.GetValue())
			case m.Gauge != nil:
				out[name(mf.GetName(), m)] = fmt.Sprintf("%gx40", m.Gauge.GetValue())
			case m.Histogram != nil:
				for _, b := range m.Histogram.Bucket {
					out[name(mf.GetName()+"_bucket", m, fmt.Sprintf("le=%q", fmt.Sprint(b.GetUpperBound())))] = counter(float64(b.GetCumulativeCount()))
				}
				out[name(mf.GetName()+"_bucket", m, `le="+Inf"`)] = counter(float64(m.Histogram.GetSampleCount()))
				out[name(mf.GetName()+"_count", m)] = counter(float64(m.Histogram.GetSampleCount()))
			}
		}
	}
	return out
}

// expectAlerts runs promtool: at each alert's EvalAt, the alerts in fire
// are firing and those in calm are not.
func expectAlerts(t *testing.T, series map[string]string, fire, calm []string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed (apt-get install prometheus)")
		}
		t.Skip("promtool is not installed")
	}
	byName := map[string]metricsfx.Alert{}
	for _, a := range metricsfx.Alerts {
		byName[a.Name] = a
	}
	dir := t.TempDir()
	p := metricsfx.Profile{Prefix: prefix}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), metricsfx.AlertRules(p), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n")
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "      - series: '%s'\n        values: '%s'\n", n, series[n])
	}
	b.WriteString("    alert_rule_test:\n")
	for _, n := range append(append([]string{}, fire...), calm...) {
		a, ok := byName[n]
		if !ok {
			t.Fatalf("no alert %s", n)
		}
		fmt.Fprintf(&b, "      - eval_time: %s\n        alertname: %s\n", alerttest.Fixtures[a.Name].EvalAt, a.Name)
		if contains(calm, n) {
			b.WriteString("        exp_alerts: []\n")
			continue
		}
		fmt.Fprintf(&b, "        exp_alerts:\n          - exp_labels:\n              severity: %s\n", a.Severity)
		for k, v := range alerttest.Fixtures[a.Name].Labels {
			fmt.Fprintf(&b, "              %s: '%s'\n", k, v)
		}
		fmt.Fprintf(&b, "            exp_annotations:\n              summary: '%s'\n              runbook: 'docs/monitoring.md#%s'\n",
			strings.ReplaceAll(a.Summary, "'", "''"), strings.ToLower(a.Name))
	}
	tests := filepath.Join(dir, "real_test.yml")
	if err := os.WriteFile(tests, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", tests).CombinedOutput(); err != nil {
		t.Fatalf("on the module's own series, want firing %v and silent %v:\n%s\nseries:\n%s", fire, calm, out, strings.Join(lines(series), "\n"))
	}
}

func lines(series map[string]string) []string {
	var out []string
	for n, v := range series {
		out = append(out, n+" "+v)
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

// Issue 19: three acquisitions that all timed out, after thousands of
// retries, read 0.0016 when the rules divided by lock_attempts_total. Here
// 7 acquisitions succeed and 3 time out (30 % of those that ended): both
// lock-timeout alerts fire.
func TestRealSeries_LockTimeouts_FireBothLockTimeoutAlerts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	m := newMetrics(t)
	keyPrefix := redistest.Prefix(t)
	holder, err := lockfx.New(rdb, lockfx.Config{KeyPrefix: keyPrefix, TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	locks, err := lockfx.New(rdb, lockfx.Config{KeyPrefix: keyPrefix, TTL: 30 * time.Second, WaitTimeout: 300 * time.Millisecond,
		Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, Attempts: 1 << 20}, lockfx.WithRegisterer(m.Registerer))
	if err != nil {
		t.Fatal(err)
	}
	// An acquire cut by WaitTimeout mid-try is given back in the
	// background: stopped with the test, not left for goleak.
	for _, l := range []*lockfx.Locker{holder, locks} {
		t.Cleanup(func() { _ = l.Stop(context.Background()) })
	}
	ctx := context.Background()
	held, err := holder.Acquire(ctx, "card")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	for i := range 7 {
		l, err := locks.Acquire(ctx, fmt.Sprint("free-", i))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	}
	for range 3 {
		if _, err := locks.Acquire(ctx, "card"); !errors.Is(err, lockfx.ErrNotAcquired) {
			t.Fatalf("acquire of a held lock: %v, want ErrNotAcquired", err)
		}
	}
	series := inputSeries(t, m.Registry)
	expectAlerts(t, series, []string{"LockTimeoutRateCritical", "LockTimeoutRateHigh"}, nil)
}

// One hit in ten reads: both hit-rate alerts fire.
func TestRealSeries_CacheMisses_FireBothHitRateAlerts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	m := newMetrics(t)
	c, err := cachefx.New(srv.Client(), cachefx.Config{KeyPrefix: redistest.Prefix(t)}, cachefx.WithRegisterer(m.Registerer))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Set(ctx, "known", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Get(ctx, "known"); !ok || err != nil {
		t.Fatalf("hit: %v %v", ok, err)
	}
	for i := range 9 {
		if _, ok, err := c.Get(ctx, fmt.Sprint("unknown-", i)); ok || err != nil {
			t.Fatalf("miss: %v %v", ok, err)
		}
	}
	expectAlerts(t, inputSeries(t, m.Registry), []string{"CacheHitRateCritical", "CacheHitRateLow"}, nil)
}

// Ten requests against a limit of two: both rejection alerts fire.
func TestRealSeries_RateLimited_FireBothRejectionAlerts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	m := newMetrics(t)
	l, err := ratelimitfx.New(srv.Client(), ratelimitfx.Config{KeyPrefix: redistest.Prefix(t)}, ratelimitfx.WithRegisterer(m.Registerer))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := l.Check(context.Background(), ratelimitfx.Rule{Name: "pay", Limit: 2, Window: time.Minute}, "client"); err != nil {
			t.Fatal(err)
		}
	}
	expectAlerts(t, inputSeries(t, m.Registry), []string{"RateLimitRejectionCritical", "RateLimitRejectionHigh"}, nil)
}

// A Redis that stops answering (frozen) under a client with the command
// metrics and the health check: store_up drops to 0, and commands that
// fail (WRONGTYPE replies here, a fault of its own) are counted, so
// StoreConnectionLost and RedisErrorRateHigh fire. With every command
// answered, neither does.
func TestRealSeries_RedisFailing_FireStoreAndErrorAlerts(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	ctx := context.Background()
	run := func(fault bool) map[string]string {
		proxy := faultproxy.Start(t, srv.Addr())
		m := newMetrics(t)
		cm, err := tracingfx.NewCommandMetrics(m.Registerer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := storefx.New(storefx.DefaultClientName, storefx.Config{URL: "redis://" + proxy.Addr()},
			tracingfx.Instrumentation(nil, tracingfx.SpanConfig{}, cm))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		reg := storefx.NewRegistry()
		_ = reg.Add(c)
		m.Registerer.MustRegister(storefx.NewAvailabilityCollector(reg))
		key := redistest.Prefix(t) + "k"
		for range 50 {
			_ = c.Get(ctx, key).Err()
		}
		if fault {
			_ = c.Set(ctx, key, "a string", time.Minute).Err()
			for range 5 {
				if c.LPush(ctx, key, "x").Err() == nil {
					t.Fatal("LPUSH on a string succeeded")
				}
			}
			proxy.SetMode(faultproxy.Freeze)
			defer proxy.SetMode(faultproxy.Forward)
		}
		stop, err := reg.Watch(storefx.DefaultClientName, time.Hour, 200*time.Millisecond) // one check, now
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		return inputSeries(t, m.Registry)
	}
	expectAlerts(t, run(false), nil, []string{"StoreConnectionLost", "RedisErrorRateHigh"})
	expectAlerts(t, run(true), []string{"StoreConnectionLost", "RedisErrorRateHigh"}, nil)
}

// httpSeries serves requests through httpfx's router (its probes,
// /metrics, and a /payments route answering payment) and returns its
// series: per 5 minutes of a quiet service, 5 payments among 20 scrapes
// and 60 probes (Prometheus every 15s, kubelet every 10s), /readyz
// answering 503 when ready fails.
func httpSeries(t *testing.T, payment int, ready error) map[string]string {
	t.Helper()
	var mux *chi.Mux
	var m *metricsfx.Metrics
	app := fx.New(fx.NopLogger,
		fx.Supply(zap.NewNop(), &httpfx.Config{Addr: "127.0.0.1:0"}, metricsfx.Config{Prefix: prefix, Registry: prometheus.NewRegistry()}),
		metricsfx.Module, httpfx.Module,
		fx.Provide(httpfx.AsReadinessCheck(func() httpfx.ReadinessCheck {
			return httpfx.ReadinessCheck{Name: "redis", Check: func(context.Context) error { return ready }}
		})),
		fx.Provide(httpfx.AsRoutes(func() httpfx.Routes {
			return func(r chi.Router) {
				r.Post("/payments", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(payment) })
			}
		})),
		fx.Populate(&mux, &m),
	)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	do := func(method, path string) {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, strings.NewReader("{}")))
	}
	for range 5 {
		do(http.MethodPost, "/payments")
	}
	for range 20 {
		do(http.MethodGet, httpfx.MetricsPath)
	}
	for range 30 {
		do(http.MethodGet, httpfx.ReadyPath)
		do(http.MethodGet, httpfx.HealthPath)
	}
	return inputSeries(t, m.Registry)
}

// A quiet payments service whose processor is down: every payment fails,
// and its scrapes and probes, 80 of 85 requests, read 5.9 % of server
// errors when the rules counted them. The rules count the customers'
// requests only: both server-error alerts fire.
func TestRealSeries_EveryPaymentFailsAmongProbes_FireBothServerErrorAlerts(t *testing.T) {
	t.Parallel()
	expectAlerts(t, httpSeries(t, http.StatusBadGateway, nil), []string{"HTTPServerErrorRateCritical", "HTTPServerErrorRateHigh"}, nil)
}

// Redis is down for the readiness check: /readyz answers 503, which no
// customer sees, and the payments succeed. Neither server-error alert
// fires (with the probes counted, 30 of 85 requests read 35 %).
func TestRealSeries_ReadyzFailing_NoServerErrorAlert(t *testing.T) {
	t.Parallel()
	expectAlerts(t, httpSeries(t, http.StatusCreated, errors.New("redis down")), nil, []string{"HTTPServerErrorRateCritical", "HTTPServerErrorRateHigh"})
}
