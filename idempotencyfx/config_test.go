package idempotencyfx

import (
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/fxconfig/fxconfigtest"
)

func TestConfig_InvalidValuesNameTheOption(t *testing.T) {
	for opt, cfg := range map[string]Config{
		"DefaultTTL":       {DefaultTTL: -time.Second},
		"HeaderName":       {HeaderName: "Bad Header"},
		"LockTimeout":      {LockTimeout: time.Millisecond},
		"WaitTimeout":      {WaitTimeout: -1},
		"NoWait":           {NoWait: true, WaitTimeout: time.Second},
		"ErrorPolicy":      {ErrorPolicy: "fail-sideways"},
		"MaxBodyBytes":     {MaxBodyBytes: -1},
		"MaxResponseBytes": {MaxResponseBytes: -1},
		"StoreTimeout":     {StoreTimeout: -1},
		"PollInterval":     {PollInterval: -1},
	} {
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), opt) {
			t.Errorf("%s: err = %v, want one naming the option", opt, err)
		}
	}
}

// Every duration is at most fxconfig.MaxDuration: the arithmetic on them
// (2×LockTimeout, LockTimeout plus a marker's life) must not overflow.
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	const tooLong = fxconfig.MaxDuration + time.Nanosecond
	longest := Config{DefaultTTL: fxconfig.MaxDuration, LockTimeout: fxconfig.MaxDuration, WaitTimeout: fxconfig.MaxDuration,
		StoreTimeout: fxconfig.MaxDuration, PollInterval: fxconfig.MaxDuration, ReplicaAckTimeout: fxconfig.MaxDuration}
	fxconfigtest.ExpectDurationBound(t, Config.Validate, map[string]Config{
		"DefaultTTL":        {DefaultTTL: tooLong},
		"LockTimeout":       {LockTimeout: tooLong},
		"WaitTimeout":       {WaitTimeout: tooLong},
		"StoreTimeout":      {StoreTimeout: tooLong},
		"PollInterval":      {PollInterval: tooLong},
		"ReplicaAckTimeout": {ReplicaAckTimeout: tooLong},
	}, longest)
}

func TestConfig_Defaults(t *testing.T) {
	s, err := DefaultConfig().normalize()
	if err != nil {
		t.Fatal(err)
	}
	if s.DefaultTTL != 24*time.Hour || s.HeaderName != "Idempotency-Key" || s.KeyPrefix != "idempotency:" ||
		s.LockTimeout != 30*time.Second || s.WaitTimeout != 10*time.Second || s.ErrorPolicy != FailClosed {
		t.Fatalf("defaults: %+v", s.Config)
	}
	if _, skip := s.skip["Set-Cookie"]; !skip {
		t.Fatal("Set-Cookie recorded by default")
	}
	if _, skip := s.skip["Transfer-Encoding"]; !skip {
		t.Fatal("hop-by-hop header recorded")
	}
}
