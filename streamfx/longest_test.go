package streamfx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/fxconfig/fxconfigtest"
	"github.com/redisfx/redisfx/internal/redistest"
)

const year = 365 * 24 * time.Hour

// A ClaimIdle of 30 years overflowed 10×ClaimIdle into a negative
// duration: a ForgetConsumersAfter of 2h passed Validate (it must be at
// least 10×ClaimIdle, so that a living consumer is never forgotten), and
// left zero it defaulted to 1h. ClaimIdle is at most a tenth of the
// longest duration, so that 10×ClaimIdle fits it.
func TestConfig_ClaimIdleAboveATenthOfTheLongest_Refused(t *testing.T) {
	for name, c := range map[string]Config{
		"ClaimIdle 30y, ForgetConsumersAfter 2h": {ClaimIdle: 30 * year, ForgetConsumersAfter: 2 * time.Hour},
		"ClaimIdle 30y":                          {ClaimIdle: 30 * year},
		"ClaimIdle just above a tenth":           {ClaimIdle: fxconfig.MaxDuration/10 + time.Nanosecond, ForgetConsumersAfter: fxconfig.MaxDuration},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Config.ClaimIdle") {
			t.Errorf("%s: %v, want an error naming Config.ClaimIdle", name, err)
		}
	}
	cfg, err := Config{ClaimIdle: fxconfig.MaxDuration / 10}.normalize()
	if err != nil || cfg.ForgetConsumersAfter != fxconfig.MaxDuration {
		t.Fatalf("default with ClaimIdle a tenth of the longest = %v, %v; want the longest", cfg.ForgetConsumersAfter, err)
	}
}

// 2×MaxAttempts×ClaimIdle overflowed: MaxAttempts 9223372037 with
// ClaimIdle 1s made it 290ms, and Handle took a Retention of 1s. With a
// Retention, the span must fit the longest duration; Handle names
// MaxAttempts when it does not (no Retention could cover it). Without one,
// MaxAttempts is not bounded (nothing multiplies it).
func TestHandle_RetrySpanAboveTheLongest_NamesMaxAttempts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := func(context.Context, Message) error { return nil }
	for _, c := range []Config{
		{MaxAttempts: 9223372037, ClaimIdle: time.Second, Retention: time.Second},
		{MaxAttempts: int(fxconfig.MaxDuration/(2*time.Second)) + 1, ClaimIdle: time.Second, Retention: fxconfig.MaxDuration},
	} {
		s := newStreams(t, srv, c)
		err := s.Handle(redistest.Prefix(t)+"s", h)
		var cerr *redisfx.ConfigError
		if !errors.As(err, &cerr) || cerr.Field != "Config.MaxAttempts" {
			t.Errorf("Handle with MaxAttempts %d, ClaimIdle %v, Retention %v: %v, want a ConfigError naming Config.MaxAttempts", c.MaxAttempts, c.ClaimIdle, c.Retention, err)
		}
	}
	at := newStreams(t, srv, Config{MaxAttempts: int(fxconfig.MaxDuration / (2 * time.Second)), ClaimIdle: time.Second, Retention: fxconfig.MaxDuration})
	if err := at.Handle(redistest.Prefix(t)+"s", h); err != nil {
		t.Errorf("a span of exactly the longest Retention refused: %v", err)
	}
	unbounded := newStreams(t, srv, Config{MaxAttempts: 1 << 62, ClaimIdle: time.Second})
	if err := unbounded.Handle(redistest.Prefix(t)+"s", h); err != nil {
		t.Errorf("MaxAttempts 2^62 without a Retention refused: %v", err)
	}
}

// Every duration is at most fxconfig.MaxDuration (ClaimIdle a tenth of it,
// above): the arithmetic on them must not overflow.
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	const tooLong = fxconfig.MaxDuration + time.Nanosecond
	longest := Config{ClaimIdle: fxconfig.MaxDuration / 10, Block: fxconfig.MaxDuration, StopTimeout: fxconfig.MaxDuration,
		Retention: fxconfig.MaxDuration, StoreTimeout: fxconfig.MaxDuration, ForgetConsumersAfter: fxconfig.MaxDuration}
	// ClaimIdle at most a tenth: ForgetConsumersAfter is at least 10×ClaimIdle.
	fxconfigtest.ExpectDurationBound(t, Config.Validate, map[string]Config{
		"ClaimIdle":            {ClaimIdle: tooLong},
		"Block":                {Block: tooLong},
		"StopTimeout":          {StopTimeout: tooLong},
		"Retention":            {Retention: tooLong},
		"StoreTimeout":         {StoreTimeout: tooLong},
		"ForgetConsumersAfter": {ForgetConsumersAfter: tooLong},
	}, longest)
}
