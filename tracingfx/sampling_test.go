package tracingfx

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestSampling_Strategies(t *testing.T) {
	remote := func(sampled bool) context.Context {
		flags := "00"
		if sampled {
			flags = "01"
		}
		carrier := propagation.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-" + flags}
		return Propagator().Extract(context.Background(), carrier)
	}
	cases := []struct {
		name string
		cfg  SamplingConfig
		env  map[string]string
		ctx  context.Context
		want int // spans exported of 200 root spans
		tol  int
	}{
		{"always", SamplingConfig{Strategy: SampleAlways}, nil, context.Background(), 200, 0},
		{"never", SamplingConfig{Strategy: SampleNever}, nil, context.Background(), 0, 0},
		{"ratio 0.25", SamplingConfig{Strategy: SampleRatio, Ratio: 0.25}, nil, context.Background(), 50, 30},
		{"parent sampled", SamplingConfig{Strategy: SampleParent, Ratio: 0.01}, nil, remote(true), 200, 0},
		{"parent not sampled", SamplingConfig{Strategy: SampleParent}, nil, remote(false), 0, 0},
		{"never but keep errors", SamplingConfig{Strategy: SampleNever, KeepErrors: true}, nil, context.Background(), 100, 0},
		{"unset: parent-based always-on", SamplingConfig{}, nil, remote(false), 0, 0},
		{"unset: new traces kept", SamplingConfig{}, nil, context.Background(), 200, 0},
		{"OTEL_TRACES_SAMPLER=always_off", SamplingConfig{}, map[string]string{envSampler: "always_off"}, context.Background(), 0, 0},
		{"OTEL_TRACES_SAMPLER=always_on ignores the parent", SamplingConfig{}, map[string]string{envSampler: "always_on"}, remote(false), 200, 0},
		{"OTEL_TRACES_SAMPLER=traceidratio 0.25", SamplingConfig{}, map[string]string{envSampler: "traceidratio", envSamplerArg: "0.25"}, context.Background(), 50, 30},
		{"OTEL_TRACES_SAMPLER=parentbased_traceidratio, sampled parent", SamplingConfig{}, map[string]string{envSampler: "parentbased_traceidratio", envSamplerArg: "0"}, remote(true), 200, 0},
		{"OTEL_TRACES_SAMPLER=parentbased_always_off", SamplingConfig{}, map[string]string{envSampler: "parentbased_always_off"}, context.Background(), 0, 0},
		{"Config wins over OTEL_TRACES_SAMPLER", SamplingConfig{Strategy: SampleAlways}, map[string]string{envSampler: "always_off"}, context.Background(), 200, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := memoryFor(t, Config{Sampling: c.cfg}, c.env)
			svc := NewTracingService(m)
			for i := 0; i < 200; i++ {
				var err error
				if i%2 == 0 {
					err = errors.New("failed")
				}
				_ = svc.WithSpan(c.ctx, "op", func(context.Context) error { return err })
			}
			got := len(m.spans())
			if got < c.want-c.tol || got > c.want+c.tol {
				t.Fatalf("exported %d of 200, want %d±%d", got, c.want, c.tol)
			}
		})
	}
}

func TestSampling_KeepSlowerThan(t *testing.T) {
	t.Parallel()
	m := memoryFor(t, Config{Sampling: SamplingConfig{Strategy: SampleNever, KeepSlowerThan: 20 * time.Millisecond}}, nil)
	tr := m.Tracer("t")
	_, fast := tr.Start(context.Background(), "fast")
	fast.End()
	_, slow := tr.Start(context.Background(), "slow", trace.WithTimestamp(time.Now().Add(-time.Second)))
	slow.End()
	if names := namesOf(m.spans()); len(names) != 1 || names[0] != "slow" {
		t.Fatalf("exported %v, want only the slow span", names)
	}
}
