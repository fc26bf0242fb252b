// Package lockfx is a distributed lock on Redis as an Fx module: owner-only
// release and extend, optional renewal, a validity that ends before Redis
// can let anyone else in, and fencing tokens. Add storefx.Module and
// lockfx.Module, optionally a Config; without Fx, New(rdb, cfg, opts...).
// See docs/locks.md.
package lockfx
