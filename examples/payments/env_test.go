package main

import (
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
