package main

import (
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx/idempotencyfx"
)

// IDEMPOTENCY_TTL is text, where by convention 0 still means "never
// expires", which in Go is the named idempotencyfx.NeverExpire (a zero
// DefaultTTL means the 24h default there).
func TestLoadEnv_TTL(t *testing.T) {
	for value, want := range map[string]time.Duration{
		"":    24 * time.Hour,
		"48h": 48 * time.Hour,
		"0":   idempotencyfx.NeverExpire,
		"0s":  idempotencyfx.NeverExpire,
	} {
		env, err := LoadEnv(func(name string) string {
			if name == "IDEMPOTENCY_TTL" {
				return value
			}
			return ""
		})
		if err != nil {
			t.Fatalf("IDEMPOTENCY_TTL=%q: %v", value, err)
		}
		if got := idempotencyConfig(env).DefaultTTL; got != want {
			t.Errorf("IDEMPOTENCY_TTL=%q: DefaultTTL %v, want %v", value, got, want)
		}
	}
}

func TestDrainTimeout_CoversTheLongestPayment(t *testing.T) {
	for _, c := range []struct {
		env  Env
		want time.Duration
	}{
		// 10 s to read the request, the duplicate's wait, the payment, 15 s for Redis.
		{Env{}, 25 * time.Second},
		{Env{PaymentsDelay: 20 * time.Second}, 45 * time.Second},
		{Env{PaymentsDelay: 20 * time.Second, CardLock: true, LockWait: 10 * time.Second}, 55 * time.Second},
		{Env{CardLock: false, LockWait: 10 * time.Second}, 25 * time.Second},
		{Env{WaitTimeout: 40 * time.Second}, 65 * time.Second},
	} {
		if got := drainTimeout(c.env); got != c.want {
			t.Errorf("drainTimeout(%+v) = %v, want %v", c.env, got, c.want)
		}
		if got := stopTimeout(c.env); got != c.want+15*time.Second {
			t.Errorf("stopTimeout(%+v) = %v, want the drain and 15 s", c.env, got)
		}
	}
}

// Found by an adversary: the example named itself "payments" whenever
// OTEL_SERVICE_NAME was unset, so service.name in OTEL_RESOURCE_ATTRIBUTES
// (an OpenTelemetry variable the contract says is honoured) lost to it.
// The app's own name is only the default of both variables.
func TestLoadEnv_ServiceNameAsOpenTelemetryReadsIt(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string // Config.ServiceName: "" lets tracingfx read the variables
	}{
		{map[string]string{}, "payments"},
		{map[string]string{"OTEL_SERVICE_NAME": "checkout"}, "checkout"},
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod, service.name=checkout"}, ""},
		{map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod"}, "payments"},
		{map[string]string{"OTEL_SERVICE_NAME": "api", "OTEL_RESOURCE_ATTRIBUTES": "service.name=checkout"}, "api"},
	} {
		env, err := LoadEnv(func(name string) string { return c.env[name] })
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if env.ServiceName != c.want {
			t.Errorf("%v: ServiceName %q, want %q", c.env, env.ServiceName, c.want)
		}
	}
}

// A REDIS_URL refused before any connection is named in the error with its
// password hidden, whatever characters the password holds and wherever it
// was put. (Found by an adversary: a password holding '/', '?' or '#' and
// starting with digits parsed as a port and a path, and the error showed
// the URL whole; so did ?password=.)
func TestLoadEnv_InvalidRedisURL_NamedWithoutItsPassword(t *testing.T) {
	for raw, shown := range map[string]string{
		"redis://app:2024/S3cretPass@127.0.0.1:6533/0":   "redis://app:xxxxx@127.0.0.1:6533/0",
		"redis://:1234/S3cretPass@127.0.0.1:6533/0":      "redis://:xxxxx@127.0.0.1:6533/0",
		"redis://:1234?S3cretPass@127.0.0.1:6533/0":      "redis://:xxxxx@127.0.0.1:6533/0",
		"redis://:1234#S3cretPass@127.0.0.1:6533/0":      "redis://:xxxxx@127.0.0.1:6533/0",
		"redis://127.0.0.1:6533/0?password=S3cretPass":   "redis://127.0.0.1:6533/0?password=xxxxx",
		"redis://u:S3cretPass@h:1/0?nosuch=3#S3cretPass": "redis://u:xxxxx@h:1/0?nosuch=xxxxx#xxxxx",
		"S3cretPass@localhost:6379":                      "(not shown: it may hold a password)",
		// A mistyped separator and "://" in the password (an adversary's).
		"redis:/app:S3cret://Pass@db:6379": "(not shown: it may hold a password)",
		"redis:app:S3cret://Pass@db:6379":  "(not shown: it may hold a password)",
	} {
		_, err := LoadEnv(func(name string) string {
			if name == "REDIS_URL" {
				return raw
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), "REDIS_URL") || !strings.Contains(err.Error(), shown) {
			t.Errorf("REDIS_URL=%s: %v, want an error naming REDIS_URL showing %s", raw, err, shown)
		}
		if err != nil && strings.Contains(err.Error(), "S3cret") {
			t.Errorf("REDIS_URL=%s: the password is in the error: %v", raw, err)
		}
	}
}
