// Package lockfx is a distributed lock on Redis as an Fx module: acquire
// with a TTL and retries, release and extend only by the owner, optional
// automatic renewal, a validity that ends (and tells the holder) before
// Redis can let anyone else in, and a fencing token that increases across
// Redis restarts. Operations are traced (lock.acquire, lock.release) and
// measured. Add storefx.Module and lockfx.Module, optionally a Config;
// without Fx, New(rdb, cfg, opts...). New refuses a go-redis client
// without ContextTimeoutEnabled (WaitTimeout could not bound a call).
// Lock names appear in spans and errors as Config.KeyAttribute says
// (redacted by default). See docs/locks.md.
package lockfx
