package streamfx

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/fxconfig"
)

// Module provides *Streams, built with the app even when nothing asks for
// it: handlers alone must consume. It needs a Redis client (storefx.Module);
// a Config or *Config, logger, registerer and plugin tracer are used when
// present.
var Module = fx.Module("redisfx.streams", clientcheck.Required("streamfx.Module"), fx.Provide(NewFromParams),
	fx.Invoke(func(*Streams) {}))

// HandlerGroup is the Fx value group of stream handlers.
const HandlerGroup = "redisfx.stream.handlers"

// StreamHandler binds a handler to a stream, for AsHandler.
type StreamHandler struct {
	Stream  string
	Handler Handler
}

// AsHandler annotates a constructor returning a StreamHandler so that
// streamfx.Module runs it:
//
//	fx.Provide(streamfx.AsHandler(func(r *Receipts) streamfx.StreamHandler {
//		return streamfx.StreamHandler{Stream: "payment.created", Handler: r.Send}
//	}))
func AsHandler(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+HandlerGroup+`"`))
}

// Params are the inputs of Streams in an Fx app.
type Params struct {
	fx.In
	Lifecycle fx.Lifecycle
	// The app's configuration, in either form (at most one of them).
	Config      *Config `optional:"true"`
	ConfigValue Config  `optional:"true"`
	Redis       redis.UniversalClient
	Log         *zap.Logger           `optional:"true"`
	Registerer  prometheus.Registerer `optional:"true"`
	Tracer      trace.TracerProvider  `name:"redisfx.plugin_tracer" optional:"true"`
	Handlers    []StreamHandler       `group:"redisfx.stream.handlers"`
}

// NewFromParams builds Streams from the Fx graph and ties the consumers to
// the lifecycle.
func NewFromParams(p Params) (*Streams, error) {
	cfg, err := fxconfig.Pick(p.Config, p.ConfigValue)
	if err != nil {
		return nil, fmt.Errorf("streamfx: %w", err)
	}
	s, err := New(p.Redis, cfg, WithRegisterer(p.Registerer), WithTracerProvider(p.Tracer), WithLogger(p.Log))
	if err != nil {
		return nil, err
	}
	for _, h := range p.Handlers {
		if err := s.Handle(h.Stream, h.Handler); err != nil {
			return nil, err
		}
	}
	p.Lifecycle.Append(fx.StartStopHook(s.Start, s.Stop))
	return s, nil
}
