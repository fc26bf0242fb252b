package streamfx

import (
	"go.uber.org/fx"

	"github.com/redisfx/redisfx/internal/clientcheck"
	"github.com/redisfx/redisfx/internal/plugin"
)

// Module provides *Streams, built with the app even when nothing asks for
// it: handlers alone must consume. It needs a Redis client (storefx.Module);
// a Config or *Config, logger, registerer and plugin tracer are used when
// present.
var Module = fx.Module("redisfx.streams", clientcheck.Required("streamfx.Module"), fx.Provide(newFromGraph),
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

func newFromGraph(p struct {
	plugin.In[Config]
	Handlers []StreamHandler `group:"redisfx.stream.handlers"`
}) (*Streams, error) {
	cfg, opts, err := p.Pick("streamfx")
	if err != nil {
		return nil, err
	}
	s, err := New(p.Redis, cfg, opts...)
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
