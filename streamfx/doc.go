// Package streamfx is Redis Streams with consumer groups as an Fx module:
// publish, consume with one handler per stream, retries, and a dead-letter
// stream "<stream>:dlq". Without Fx: New(rdb, cfg, opts...), Handle, Start
// and Stop. See docs/streams.md.
package streamfx
