// Package embedded runs an in-process Redis (miniredis) for demos: the
// payments example uses it when REDIS_URL is not set, so that it runs on a
// machine without Redis. Keys expire in real time (miniredis only expires
// keys when told to; a ticker tells it), so every idempotency feature,
// failed-record expiry included, behaves as on a real server. It keeps
// nothing on disk and is not for production.
package embedded

import (
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Redis is an embedded server.
type Redis struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	done sync.WaitGroup
}

// Start runs an embedded Redis on a free loopback port.
func Start() (*Redis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, err
	}
	r := &Redis{m: m, stop: make(chan struct{})}
	r.done.Add(1)
	go r.expire()
	return r, nil
}

// expire advances miniredis's TTL clock with the wall clock.
func (r *Redis) expire() {
	defer r.done.Done()
	const tick = 20 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.m.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr is host:port of the server.
func (r *Redis) Addr() string { return r.m.Addr() }

// URL is redis://host:port.
func (r *Redis) URL() string { return "redis://" + r.m.Addr() }

// Close stops the server.
func (r *Redis) Close() {
	close(r.stop)
	r.done.Wait()
	r.m.Close()
}
