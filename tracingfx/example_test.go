package tracingfx_test

import (
	"context"
	"errors"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/tracingfx"
)

// PaymentService receives the tracer by its name, TRACING_SERVICE.
type PaymentService struct{ tracer tracingfx.ITracingService }

type paymentParams struct {
	fx.In
	Tracer tracingfx.ITracingService `name:"TRACING_SERVICE"`
}

func (s *PaymentService) Charge(ctx context.Context, amount int64) error {
	return s.tracer.WithSpan(ctx, "payment.charge", func(ctx context.Context) error {
		s.tracer.SetAttribute(ctx, "payment.amount", amount)
		if amount <= 0 {
			return errors.New("nothing to charge") // span status ERROR, exception recorded
		}
		return nil
	}, tracingfx.ISpanOptions{Kind: tracingfx.KindInternal})
}

// Inject the tracing service by name into an application service.
func ExampleITracingService() {
	_ = fx.New(
		fx.Provide(zap.NewProduction),
		fx.Supply(&tracingfx.Config{
			ServiceName: "payments",
			Exporter: tracingfx.ExporterConfig{Type: tracingfx.ExporterOTLP, Endpoint: "http://collector:4318",
				Headers: map[string]string{"authorization": "Bearer <ACCESS_TOKEN>"}},
			Sampling: tracingfx.SamplingConfig{Strategy: tracingfx.SampleParent, Ratio: 0.05, KeepErrors: true},
		}),
		tracingfx.Module,
		fx.Provide(func(p paymentParams) *PaymentService { return &PaymentService{tracer: p.Tracer} }),
	)
}
