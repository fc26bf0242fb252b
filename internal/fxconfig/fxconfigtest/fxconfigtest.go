// Package fxconfigtest checks, in a module's tests, the bound every Config
// puts on its durations (fxconfig.MaxDuration).
package fxconfigtest

import (
	"errors"
	"testing"

	"github.com/redisfx/redisfx"
)

// ExpectDurationBound checks that validate refuses each configuration of
// tooLong (one duration above the bound, keyed by its field without the
// "Config." prefix) with a *redisfx.ConfigError naming that field, and
// takes longest (every duration at the bound).
func ExpectDurationBound[C any](t testing.TB, validate func(C) error, tooLong map[string]C, longest C) {
	t.Helper()
	for field, cfg := range tooLong {
		var ce *redisfx.ConfigError
		if err := validate(cfg); !errors.As(err, &ce) || ce.Field != "Config."+field {
			t.Errorf("%s above the longest duration: err = %v, want a *redisfx.ConfigError naming Config.%s", field, err, field)
		}
	}
	if err := validate(longest); err != nil {
		t.Errorf("every duration at the longest: %v", err)
	}
}
