// Package streamfx is Redis Streams with consumer groups as an Fx module:
// publish, consume with one handler per stream, retries of failed or
// abandoned messages, and a dead-letter stream "<stream>:dlq" after
// Config.MaxAttempts. Consumers start and stop with the application, in
// bounded time; the trace context travels inside each message. Without Fx:
// New(rdb, cfg, opts...), Handle, Start and Stop. The client must have
// ContextTimeoutEnabled (storefx's have). See docs/streams.md.
package streamfx
