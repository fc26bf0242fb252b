package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/ratelimitfx"
	"github.com/redisfx/redisfx/storefx"
	"github.com/redisfx/redisfx/tracingfx"
)

// Env is the example's configuration, read from the environment (see
// docs/configuration.md and the payments contract).
type Env struct {
	HTTPAddr        string
	RedisURL        string // empty: embedded Redis
	Header          string
	KeyPrefix       string
	TTL             time.Duration
	LockTimeout     time.Duration
	WaitTimeout     time.Duration
	ErrorPolicy     idempotencyfx.ErrorPolicy
	PaymentsDelay   time.Duration
	TracingExporter string
	ServiceName     string
	MetricsPrefix   string
	// RateLimit > 0 limits POST /payments to RateLimit per RateLimitWindow
	// per client IP (RATE_LIMIT="100/1m"); 0: no limit.
	RateLimit       int64
	RateLimitWindow time.Duration
	TrustedProxies  []string
	// CardLock charges each card under its distributed lock
	// (PAYMENTS_CARD_LOCK=on); LockWait bounds the wait for it
	// (PAYMENTS_LOCK_WAIT).
	CardLock bool
	LockWait time.Duration
}

// EnvError names the variable whose value is invalid.
type EnvError struct {
	Variable, Value, Reason string
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("invalid %s=%q: %s", e.Variable, e.Value, e.Reason)
}

// LoadEnv reads and validates every variable; the first invalid one is an
// *EnvError naming it.
func LoadEnv(getenv func(string) string) (Env, error) {
	get := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	e := Env{
		HTTPAddr:        get("HTTP_ADDR", ":8080"),
		RedisURL:        getenv("REDIS_URL"),
		Header:          get("IDEMPOTENCY_HEADER", idempotencyfx.DefaultHeaderName),
		KeyPrefix:       get("IDEMPOTENCY_KEY_PREFIX", idempotencyfx.DefaultKeyPrefix),
		ErrorPolicy:     idempotencyfx.ErrorPolicy(get("IDEMPOTENCY_ERROR_POLICY", string(idempotencyfx.FailClosed))),
		TracingExporter: get("TRACING_EXPORTER", tracingfx.ExporterNone),
		MetricsPrefix:   get("METRICS_PREFIX", "payments"),
		ServiceName:     getenv("OTEL_SERVICE_NAME"),
	}
	if e.ServiceName == "" {
		e.ServiceName = "payments"
	}
	var err error
	durations := []struct {
		name, def string
		to        *time.Duration
	}{
		{"IDEMPOTENCY_TTL", "24h", &e.TTL},
		{"IDEMPOTENCY_LOCK_TIMEOUT", "30s", &e.LockTimeout},
		{"IDEMPOTENCY_WAIT_TIMEOUT", "10s", &e.WaitTimeout},
		{"PAYMENTS_DELAY", "0", &e.PaymentsDelay},
		{"PAYMENTS_LOCK_WAIT", "10s", &e.LockWait},
	}
	for _, d := range durations {
		v := get(d.name, d.def)
		if *d.to, err = time.ParseDuration(v); err != nil {
			return e, &EnvError{d.name, v, "not a Go duration (e.g. 300ms, 30s, 24h)"}
		}
		if *d.to < 0 {
			return e, &EnvError{d.name, v, "negative duration"}
		}
	}
	if e.RedisURL != "" {
		if _, err := storefx.ParseURL(e.RedisURL); err != nil {
			return e, &EnvError{"REDIS_URL", redactURL(e.RedisURL), "not a redis:// or rediss:// URL"}
		}
	}
	if e.ErrorPolicy != idempotencyfx.FailClosed && e.ErrorPolicy != idempotencyfx.FailOpen {
		return e, &EnvError{"IDEMPOTENCY_ERROR_POLICY", string(e.ErrorPolicy), "not fail-closed or fail-open"}
	}
	if e.LockTimeout < 10*time.Millisecond {
		return e, &EnvError{"IDEMPOTENCY_LOCK_TIMEOUT", getenv("IDEMPOTENCY_LOCK_TIMEOUT"), "shorter than 10ms"}
	}
	if err := (idempotencyfx.Config{HeaderName: e.Header}).Validate(); err != nil {
		return e, &EnvError{"IDEMPOTENCY_HEADER", e.Header, "not an HTTP header name"}
	}
	switch e.TracingExporter {
	case tracingfx.ExporterOTLP, tracingfx.ExporterConsole, tracingfx.ExporterJaeger, tracingfx.ExporterZipkin, tracingfx.ExporterNone:
	default:
		return e, &EnvError{"TRACING_EXPORTER", e.TracingExporter, "not otlp, console, jaeger, zipkin or none"}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v := getenv(name); v != "" {
			if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return e, &EnvError{name, v, "not an http(s) URL"}
			}
		}
	}
	switch v := getenv("OTEL_TRACES_SAMPLER"); v {
	case "", "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio":
	default:
		return e, &EnvError{"OTEL_TRACES_SAMPLER", v, "not a sampler OpenTelemetry knows"}
	}
	if v := getenv("OTEL_TRACES_SAMPLER_ARG"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err != nil || f < 0 || f > 1 {
			return e, &EnvError{"OTEL_TRACES_SAMPLER_ARG", v, "not a number between 0 and 1"}
		}
	}
	if v := getenv("RATE_LIMIT"); v != "" {
		if e.RateLimit, e.RateLimitWindow, err = parseRate(v); err != nil {
			return e, &EnvError{"RATE_LIMIT", v, err.Error()}
		}
	}
	if v := getenv("RATE_LIMIT_TRUSTED_PROXIES"); v != "" {
		e.TrustedProxies = strings.Split(v, ",")
		if err := (ratelimitfx.Config{TrustedProxies: e.TrustedProxies}).Validate(); err != nil {
			return e, &EnvError{"RATE_LIMIT_TRUSTED_PROXIES", v, "not a comma-separated list of addresses or CIDR ranges"}
		}
	}
	switch v := get("PAYMENTS_CARD_LOCK", "off"); v {
	case "on", "off":
		e.CardLock = v == "on"
	default:
		return e, &EnvError{"PAYMENTS_CARD_LOCK", v, "not on or off"}
	}
	if e.LockWait == 0 {
		return e, &EnvError{"PAYMENTS_LOCK_WAIT", getenv("PAYMENTS_LOCK_WAIT"), "must be positive"}
	}
	if err := validPrefix(e.MetricsPrefix); err != nil {
		return e, &EnvError{"METRICS_PREFIX", e.MetricsPrefix, err.Error()}
	}
	return e, nil
}

// parseRate reads "<requests>/<window>", e.g. "100/1m" or "5/10s".
func parseRate(v string) (int64, time.Duration, error) {
	n, w, ok := strings.Cut(v, "/")
	limit, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || limit <= 0 {
		return 0, 0, fmt.Errorf("not <requests>/<window>, e.g. 100/1m")
	}
	window, err := time.ParseDuration(w)
	if err != nil || window < time.Millisecond {
		return 0, 0, fmt.Errorf("not <requests>/<window>, e.g. 100/1m")
	}
	return limit, window, nil
}

func validPrefix(p string) error {
	for i, c := range p {
		if c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return fmt.Errorf("not a Prometheus name ([a-zA-Z_][a-zA-Z0-9_]*)")
	}
	return nil
}

func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparseable)"
}
