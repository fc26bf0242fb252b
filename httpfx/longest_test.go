package httpfx_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/internal/fxconfig"
)

// Every timeout is at most fxconfig.MaxDuration, as in every module, so
// that the arithmetic on them cannot overflow (none was found here: the
// drain's bound only subtracts from the time Fx leaves, and net/http adds
// the timeouts to time.Now with time.Time.Add, which does not wrap).
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	t.Parallel()
	const tooLong = fxconfig.MaxDuration + time.Nanosecond
	for field, cfg := range map[string]httpfx.Config{
		"ReadHeaderTimeout": {ReadHeaderTimeout: tooLong},
		"ReadTimeout":       {ReadTimeout: tooLong},
		"WriteTimeout":      {WriteTimeout: tooLong},
		"IdleTimeout":       {IdleTimeout: tooLong},
		"ShutdownTimeout":   {ShutdownTimeout: tooLong},
	} {
		for how, err := range map[string]error{
			"Validate": cfg.Validate(),
			"fx.New":   fx.New(fx.NopLogger, fx.Provide(zap.NewNop), fx.Supply(&cfg), httpfx.Module).Err(),
		} {
			var ce *redisfx.ConfigError
			if !errors.As(err, &ce) || ce.Field != "Config."+field {
				t.Errorf("%s of %s above the longest: %v, want a ConfigError naming it", how, field, err)
			}
		}
	}
	longest := httpfx.Config{ReadHeaderTimeout: fxconfig.MaxDuration, ReadTimeout: fxconfig.MaxDuration,
		WriteTimeout: fxconfig.MaxDuration, IdleTimeout: fxconfig.MaxDuration, ShutdownTimeout: fxconfig.MaxDuration}
	if err := longest.Validate(); err != nil {
		t.Errorf("every timeout at the longest: %v", err)
	}
}
