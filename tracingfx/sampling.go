package tracingfx

import (
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// keeps reports whether unsampled spans must be recorded, to keep their
// errors or slow ones (Sampling.KeepErrors, Sampling.KeepSlowerThan).
func keeps(s SamplingConfig) bool { return s.KeepErrors || s.KeepSlowerThan > 0 }

func (s settings) wrapProcessor(proc sdktrace.SpanProcessor) sdktrace.SpanProcessor {
	if !keeps(s.Sampling) {
		return proc
	}
	return &keeper{SpanProcessor: proc, errors: s.Sampling.KeepErrors, slower: s.Sampling.KeepSlowerThan}
}

// recordAll records the spans its inner sampler drops, without sampling
// them, so that keeper can still export the errors and slow ones at their end.
type recordAll struct{ inner sdktrace.Sampler }

// ShouldSample implements sdktrace.Sampler.
func (r recordAll) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := r.inner.ShouldSample(p)
	if res.Decision == sdktrace.Drop {
		res.Decision = sdktrace.RecordOnly
	}
	return res
}

// Description implements sdktrace.Sampler.
func (r recordAll) Description() string { return "RecordAll{" + r.inner.Description() + "}" }

// keeper passes sampled spans on, and unsampled ones only if they ended in
// error or were slow.
type keeper struct {
	sdktrace.SpanProcessor
	errors bool
	slower time.Duration
}

// OnEnd implements sdktrace.SpanProcessor.
func (k *keeper) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() {
		k.SpanProcessor.OnEnd(s)
		return
	}
	if (k.errors && s.Status().Code == codes.Error) || (k.slower > 0 && s.EndTime().Sub(s.StartTime()) > k.slower) {
		k.SpanProcessor.OnEnd(kept{s})
	}
}

// kept presents an unsampled span as sampled, so the processor exports it.
type kept struct{ sdktrace.ReadOnlySpan }

// SpanContext implements sdktrace.ReadOnlySpan: the span as exported.
func (k kept) SpanContext() trace.SpanContext {
	sc := k.ReadOnlySpan.SpanContext()
	return sc.WithTraceFlags(sc.TraceFlags().WithSampled(true))
}

// configSamplers names the sampler of each Config strategy as
// OTEL_TRACES_SAMPLER does.
var configSamplers = map[string]string{SampleAlways: "always_on", SampleNever: "always_off",
	SampleRatio: "traceidratio", SampleParent: "parentbased_traceidratio"}
