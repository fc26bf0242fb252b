package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redisfx/redisfx"
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
	// KeyHashSecret keys the digest that stands for a card's lock name in
	// the spans (PAYMENTS_KEY_HASH_SECRET): processes that share it write
	// the same digest for the same card. Unset: a random secret of this
	// process.
	KeyHashSecret []byte
}

// idempotencyVariables are the variables behind the fields of the
// idempotency Config (idempotencyConfig).
var idempotencyVariables = map[string]string{
	"Config.DefaultTTL":  "IDEMPOTENCY_TTL",
	"Config.HeaderName":  "IDEMPOTENCY_HEADER",
	"Config.KeyPrefix":   "IDEMPOTENCY_KEY_PREFIX",
	"Config.LockTimeout": "IDEMPOTENCY_LOCK_TIMEOUT",
	"Config.WaitTimeout": "IDEMPOTENCY_WAIT_TIMEOUT",
	"Config.NoWait":      "IDEMPOTENCY_WAIT_TIMEOUT",
	"Config.ErrorPolicy": "IDEMPOTENCY_ERROR_POLICY",
}

// EnvError names the variable whose value is invalid.
type EnvError struct {
	Variable, Value, Reason string
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("invalid %s=%q: %s", e.Variable, e.Value, e.Reason)
}

// maxDuration bounds every duration variable: about 11 years, far beyond
// any use, and three of them summed (requestBound) stay far from
// time.Duration's limit of 292 years.
const maxDuration = 100000 * time.Hour

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
		TracingExporter: getenv("TRACING_EXPORTER"), // unset: the OTEL_* variables decide (tracingfx)
		MetricsPrefix:   get("METRICS_PREFIX", "payments"),
		ServiceName:     getenv("OTEL_SERVICE_NAME"),
	}
	if e.ServiceName == "" && !namesService(getenv("OTEL_RESOURCE_ATTRIBUTES")) {
		// The app's own name, which the OpenTelemetry variables override:
		// OTEL_SERVICE_NAME, or service.name in OTEL_RESOURCE_ATTRIBUTES
		// (tracingfx reads and validates both).
		e.ServiceName = "payments"
	}
	e.KeyHashSecret = []byte(getenv("PAYMENTS_KEY_HASH_SECRET"))
	if len(e.KeyHashSecret) == 0 {
		e.KeyHashSecret = make([]byte, 32)
		_, _ = rand.Read(e.KeyHashSecret) // never fails (crypto/rand)
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
		if *d.to > maxDuration {
			// The server's timeouts are sums of these (requestBound): a
			// value near time.Duration's limit overflowed them.
			return e, &EnvError{d.name, v, "longer than " + maxDuration.String() + ", the longest this example takes"}
		}
	}
	if e.LockTimeout == 0 {
		// Not the module's "0 takes the default": a lease of nothing is no
		// lease, and a silent 30 s would not be what was asked.
		return e, &EnvError{"IDEMPOTENCY_LOCK_TIMEOUT", getenv("IDEMPOTENCY_LOCK_TIMEOUT"), "must be positive (the in-progress lease)"}
	}
	if e.TTL == 0 {
		// The convention of a TTL written as text: 0 never expires. In Go that is
		// the named NeverExpire; a zero DefaultTTL would mean 24h.
		e.TTL = idempotencyfx.NeverExpire
	}
	if msg := badListenAddr(e.HTTPAddr); msg != "" {
		return e, &EnvError{"HTTP_ADDR", e.HTTPAddr, msg}
	}
	if e.RedisURL != "" {
		// storefx's own rules on the URL (go-redis's parsing, a user name
		// without a password …), reported with the variable's name; its
		// reasons never repeat a password.
		var ce *redisfx.ConfigError
		if err := (storefx.Config{URL: e.RedisURL}).Validate(); errors.As(err, &ce) {
			return e, &EnvError{"REDIS_URL", redactURL(e.RedisURL), ce.Reason}
		}
	}
	// The idempotency settings are checked by the module's own rules, here,
	// so that whatever it refuses is reported with the variable's name.
	if err := idempotencyConfig(e).Validate(); err != nil {
		var ce *redisfx.ConfigError
		if errors.As(err, &ce) {
			if name, ok := idempotencyVariables[ce.Field]; ok {
				return e, &EnvError{name, get(name, "(default)"), ce.Reason}
			}
		}
		return e, err
	}
	switch e.TracingExporter {
	case "", tracingfx.ExporterOTLP, tracingfx.ExporterConsole, tracingfx.ExporterJaeger, tracingfx.ExporterZipkin, tracingfx.ExporterNone:
	default:
		return e, &EnvError{"TRACING_EXPORTER", e.TracingExporter, "not otlp, console, jaeger, zipkin or none"}
	}
	// The OTEL_* variables are tracingfx's: it fails start-up naming a bad one.
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
	// What ratelimitfx refuses (a window that is not whole milliseconds, or
	// above 100 years) is reported here, with the variable's name: from the
	// module, start-up failed naming only Config.Window (an adversary's find).
	var ce *redisfx.ConfigError
	if err := (ratelimitfx.Config{Limit: limit, Window: window}).Validate(); errors.As(err, &ce) {
		return 0, 0, fmt.Errorf("the window: %s", ce.Reason)
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

// redactURL is raw as shown in an error: everything after the user name up
// to the last '@' (the password, whatever characters it holds) and every
// query or fragment value become "xxxxx". url.Parse could not be trusted
// with it: a password holding '/', '?' or '#' and starting with digits
// parses as a port and a path, and Redacted then hid nothing
// ("redis://app:2024/S3cret@host" was shown whole, as was ?password=;
// found by an adversary). Text before the last '@' that does not begin
// with a scheme and "://" ("redis:/app:pa://ss@host", a mistyped
// separator) is not shown at all.
func redactURL(raw string) string {
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return redactOptions(raw)
	}
	scheme, userinfo, ok := strings.Cut(raw[:at], "://")
	if !ok || !urlScheme(scheme) {
		return "(not shown: it may hold a password)"
	}
	if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
		userinfo = user + ":xxxxx"
	}
	return scheme + "://" + userinfo + "@" + redactOptions(raw[at+1:])
}

// urlScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, '+', '-' or '.').
func urlScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		other := '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
		if !letter && (i == 0 || !other) {
			return false
		}
	}
	return s != ""
}

// redactOptions shows the values of s's query options and its fragment as
// "xxxxx", keeping the options' names (?pool_size=xxxxx says what was
// refused).
func redactOptions(s string) string {
	i := strings.IndexAny(s, "?#")
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		b.WriteByte(s[i]) // '?', '&' or '#'
		end := i + 1 + strings.IndexAny(s[i+1:]+"&", "?#&")
		if name, _, isOption := strings.Cut(s[i+1:end], "="); isOption && s[i] != '#' {
			b.WriteString(name + "=xxxxx")
		} else if end > i+1 {
			b.WriteString("xxxxx")
		}
		i = end
	}
	return b.String()
}

// badListenAddr says what is wrong with a listen address ("host:port",
// ":port"; the port a number up to 65535 or a service name), or "".
func badListenAddr(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "not a listen address host:port (e.g. :8080, 127.0.0.1:8080)"
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return "the port is not a number from 0 to 65535"
	}
	return ""
}

// namesService reports whether OTEL_RESOURCE_ATTRIBUTES (key=value,…) sets
// service.name.
func namesService(attrs string) bool {
	for _, entry := range strings.Split(attrs, ",") {
		if k, _, ok := strings.Cut(entry, "="); ok && strings.TrimSpace(k) == "service.name" {
			return true
		}
	}
	return false
}
