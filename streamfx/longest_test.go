package streamfx

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/redistest"
)

const year = 365 * 24 * time.Hour

// 10×ClaimIdle saturates: a ClaimIdle of 30 years once wrapped it negative,
// and any ForgetConsumersAfter passed.
func TestConfig_HugeClaimIdle_TenfoldSaturates(t *testing.T) {
	err := Config{ClaimIdle: 30 * year, ForgetConsumersAfter: 2 * time.Hour}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Config.ForgetConsumersAfter") {
		t.Fatalf("ClaimIdle 30y, ForgetConsumersAfter 2h: %v, want an error naming Config.ForgetConsumersAfter", err)
	}
	cfg, err := Config{ClaimIdle: 30 * year}.normalize()
	if err != nil || cfg.ForgetConsumersAfter != math.MaxInt64 {
		t.Fatalf("default ForgetConsumersAfter with ClaimIdle 30y = %v, %v; want the largest Duration", cfg.ForgetConsumersAfter, err)
	}
}

// 2×MaxAttempts×ClaimIdle saturates: MaxAttempts 9223372037 with ClaimIdle
// 1s once wrapped it to 290ms, and Handle took a Retention of 1s.
func TestHandle_HugeRetrySpanSaturates_RetentionRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := func(context.Context, Message) error { return nil }
	s := newStreams(t, srv, Config{MaxAttempts: 9223372037, ClaimIdle: time.Second, Retention: time.Second})
	var cerr *redisfx.ConfigError
	if err := s.Handle(redistest.Prefix(t)+"s", h); !errors.As(err, &cerr) || cerr.Field != "Config.Retention" {
		t.Errorf("Handle: %v, want a ConfigError naming Config.Retention", err)
	}
	unbounded := newStreams(t, srv, Config{MaxAttempts: 1 << 62, ClaimIdle: time.Second})
	if err := unbounded.Handle(redistest.Prefix(t)+"s", h); err != nil {
		t.Errorf("MaxAttempts 2^62 without a Retention refused: %v", err)
	}
}
