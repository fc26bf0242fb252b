package tracingfx

import (
	"strings"
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/fxconfig"
)

// Every duration is at most fxconfig.MaxDuration, as in every module, so
// that the arithmetic on them cannot overflow (none was found here: the
// SDK and this package only wait for them or compare with them).
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	const tooLong = fxconfig.MaxDuration + time.Nanosecond
	for opt, cfg := range map[string]Config{
		"Sampling.KeepSlowerThan": {Sampling: SamplingConfig{KeepSlowerThan: tooLong}},
		"Batch.ScheduleDelay":     {Batch: BatchConfig{ScheduleDelay: tooLong}},
		"Batch.ExportTimeout":     {Batch: BatchConfig{ExportTimeout: tooLong}},
		"ShutdownTimeout":         {ShutdownTimeout: tooLong},
	} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Config."+opt+":") {
			t.Errorf("%s: err = %v, want one naming the option", opt, err)
		}
	}
	longest := Config{Sampling: SamplingConfig{KeepSlowerThan: fxconfig.MaxDuration},
		Batch: BatchConfig{ScheduleDelay: fxconfig.MaxDuration, ExportTimeout: fxconfig.MaxDuration}, ShutdownTimeout: fxconfig.MaxDuration}
	if err := longest.Validate(); err != nil {
		t.Errorf("every duration at the longest: %v", err)
	}
}
