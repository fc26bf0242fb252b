package idempotencyfx

import (
	"strings"
	"testing"
	"time"
)

func TestConfig_InvalidValuesNameTheOption(t *testing.T) {
	for opt, cfg := range map[string]Config{
		"DefaultTTL":   {DefaultTTL: -time.Second},
		"HeaderName":   {HeaderName: "Bad Header"},
		"LockTimeout":  {LockTimeout: time.Millisecond},
		"NoWait":       {NoWait: true, WaitTimeout: time.Second},
		"ErrorPolicy":  {ErrorPolicy: "fail-sideways"},
		"StoreTimeout": {StoreTimeout: -1},
	} {
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), opt) {
			t.Errorf("%s: err = %v, want one naming the option", opt, err)
		}
	}
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

// Durations have no upper bound: the arithmetic on them saturates.
func TestConfig_CenturiesAccepted(t *testing.T) {
	const long = 150 * 365 * 24 * time.Hour
	if err := (Config{DefaultTTL: long, LockTimeout: long, WaitTimeout: long, StoreTimeout: long,
		PollInterval: long, ReplicaAckTimeout: long}).Validate(); err != nil {
		t.Fatal(err)
	}
}
