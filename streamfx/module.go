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
var Module = fx.Module("redisfx.streams", clientcheck.Required("streamfx.Module"),
	plugin.Provide("streamfx", New, func(s *Streams) fx.Hook { return fx.StartStopHook(s.Start, s.Stop) }),
	fx.Invoke(handleAll))

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

// handleAll registers the app's handlers before Start. The handlers are
// built first, so what they use starts before Streams and stops after it.
func handleAll(p struct {
	fx.In
	Handlers []StreamHandler `group:"redisfx.stream.handlers"`
	Streams  *Streams
}) error {
	for _, h := range p.Handlers {
		if err := p.Streams.Handle(h.Stream, h.Handler); err != nil {
			return err
		}
	}
	return nil
}
