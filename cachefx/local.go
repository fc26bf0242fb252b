package cachefx

import (
	"container/list"
	"sync"
	"time"
)

// localLayer is the in-process first layer: a least-recently-used map
// bounded in entries, each entry bounded in age. Values are shared, never
// copied: callers must not modify the bytes they get.
type localLayer struct {
	max int
	ttl time.Duration

	mu    sync.Mutex
	order *list.List // front = most recently used
	items map[string]*list.Element
	// epoch counts writes and invalidations. A value read from Redis is
	// kept only if no write or invalidation happened while it was being
	// read, or an older value could outlive a newer one's invalidation.
	epoch uint64
}

type localEntry struct {
	key     string
	value   []byte
	expires time.Time
}

func newLocalLayer(max int, ttl time.Duration) *localLayer {
	return &localLayer{max: max, ttl: ttl, order: list.New(), items: make(map[string]*list.Element, max)}
}

func (l *localLayer) get(key string, now time.Time) ([]byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.items[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*localEntry)
	if !now.Before(e.expires) {
		l.order.Remove(el)
		delete(l.items, key)
		return nil, false
	}
	l.order.MoveToFront(el)
	return e.value, true
}

// currentEpoch is read before a Redis read whose value may fill the layer.
func (l *localLayer) currentEpoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// fill keeps a value read from Redis, unless a write or an invalidation
// happened since seen (then the value may already be stale).
func (l *localLayer) fill(key string, value []byte, ttl time.Duration, now time.Time, seen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch == seen {
		l.store(key, value, ttl, now)
	}
}

// set stores a value this process just wrote.
func (l *localLayer) set(key string, value []byte, ttl time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	l.store(key, value, ttl, now)
}

// store keeps value for at most the layer's TTL and at most ttl (the
// value's remaining life in Redis). l.mu is held.
func (l *localLayer) store(key string, value []byte, ttl time.Duration, now time.Time) {
	ttl = min(ttl, l.ttl)
	if ttl <= 0 {
		return
	}
	if el, ok := l.items[key]; ok {
		e := el.Value.(*localEntry)
		e.value, e.expires = value, now.Add(ttl)
		l.order.MoveToFront(el)
		return
	}
	l.items[key] = l.order.PushFront(&localEntry{key: key, value: value, expires: now.Add(ttl)})
	for l.order.Len() > l.max {
		oldest := l.order.Back()
		l.order.Remove(oldest)
		delete(l.items, oldest.Value.(*localEntry).key)
	}
}

func (l *localLayer) delete(keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	for _, k := range keys {
		if el, ok := l.items[k]; ok {
			l.order.Remove(el)
			delete(l.items, k)
		}
	}
}

func (l *localLayer) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	l.order.Init()
	clear(l.items)
}

func (l *localLayer) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}
