package tracingfx

import (
	"testing"
	"time"

	"github.com/redisfx/redisfx/internal/fxconfig"
	"github.com/redisfx/redisfx/internal/fxconfig/fxconfigtest"
)

// Every duration is at most fxconfig.MaxDuration, as in every module, so
// that the arithmetic on them cannot overflow (none was found here: the
// SDK and this package only wait for them or compare with them).
func TestConfig_DurationsAboveTheLongestNameTheOption(t *testing.T) {
	const tooLong = fxconfig.MaxDuration + time.Nanosecond
	longest := Config{Sampling: SamplingConfig{KeepSlowerThan: fxconfig.MaxDuration},
		Batch: BatchConfig{ScheduleDelay: fxconfig.MaxDuration, ExportTimeout: fxconfig.MaxDuration}, ShutdownTimeout: fxconfig.MaxDuration}
	fxconfigtest.ExpectDurationBound(t, Config.Validate, map[string]Config{
		"Sampling.KeepSlowerThan": {Sampling: SamplingConfig{KeepSlowerThan: tooLong}},
		"Batch.ScheduleDelay":     {Batch: BatchConfig{ScheduleDelay: tooLong}},
		"Batch.ExportTimeout":     {Batch: BatchConfig{ExportTimeout: tooLong}},
		"ShutdownTimeout":         {ShutdownTimeout: tooLong},
	}, longest)
}
