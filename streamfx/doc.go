// Package streamfx is Redis Streams with consumer groups as an Fx module:
// publish, consume with one handler per stream, acknowledge on success,
// retry failed or abandoned messages (pending entries claimed again after
// an idle time), and after the maximum number of attempts move a message to
// the dead-letter stream "<stream>:dlq" with its reason. Consumers start and
// stop with the application; on stop they finish the messages in hand, in
// bounded time. The trace context travels inside each message, so a
// consumer's span joins the producer's trace. Spans: stream.publish,
// stream.consume, stream.ack, stream.move_to_dlq; metrics: stream_length,
// stream_consumer_lag, stream_messages_total.
//
// # Getting started
//
//	fx.New(
//		storefx.Module, tracingfx.Module, metricsfx.Module, // tracing and metrics optional
//		streamfx.Module,
//		fx.Supply(streamfx.Config{Group: "billing"}), // optional
//		fx.Provide(streamfx.AsHandler(func() streamfx.StreamHandler {
//			return streamfx.StreamHandler{Stream: "orders", Handler: handle}
//		})),
//	)
//
// Without Fx, New(rdb, cfg, opts...), Handle, then Start and Stop. The
// client must have ContextTimeoutEnabled (storefx's have). Zero Config
// fields take their defaults; an invalid one fails start-up with a
// redisfx.ConfigError naming it.
package streamfx
