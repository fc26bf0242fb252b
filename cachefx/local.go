package cachefx

import (
	"container/list"
	"sync"
	"time"
)

// localLayer is the in-process first layer: a least-recently-used map
// bounded in entries, each entry bounded in age. Values are shared, never
// copied: callers must not modify the bytes they get. An entry expires no
// later than Redis drops the value (see store).
type localLayer struct {
	max int
	ttl time.Duration

	mu    sync.Mutex
	order *list.List // front = most recently used
	items map[string]*list.Element
	// epoch counts writes and invalidations. A value read from Redis (or
	// written by this process) is kept only if no write or invalidation
	// reached this process while the Redis request was in flight:
	// otherwise an older value could outlive a newer one's invalidation.
	epoch uint64
}

type localEntry struct {
	key     string
	value   []byte
	expires time.Time
}

func newLocalLayer(maxEntries int, ttl time.Duration) *localLayer {
	return &localLayer{max: maxEntries, ttl: ttl, order: list.New(), items: make(map[string]*list.Element, maxEntries)}
}

// entry is the entry an element of l.order holds (only *localEntry ever does).
func entry(el *list.Element) *localEntry {
	e, _ := el.Value.(*localEntry)
	return e
}

func (l *localLayer) get(key string, now time.Time) ([]byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.items[key]
	if !ok || !now.Before(entry(el).expires) {
		l.remove(key)
		return nil, false
	}
	l.order.MoveToFront(el)
	return entry(el).value, true
}

func (l *localLayer) currentEpoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// fill keeps a value that a request sent at sent read from Redis (or, if
// write, stored there), with ttl left in Redis, unless a write or an
// invalidation happened since seen: the value may then be stale, and after
// a write which value Redis kept is unknown, so the key is dropped.
func (l *localLayer) fill(key string, value []byte, ttl time.Duration, sent time.Time, seen uint64, write bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch == seen {
		l.store(key, value, ttl, sent)
	} else if write {
		l.remove(key)
	}
	if write {
		l.epoch++
	}
}

// store keeps value for at most the layer's TTL and ttl (its remaining
// life in Redis, cut to whole milliseconds as PX does), counted from sent.
// l.mu is held.
func (l *localLayer) store(key string, value []byte, ttl time.Duration, sent time.Time) {
	ttl = min(ttl.Truncate(time.Millisecond), l.ttl)
	if ttl <= 0 {
		return
	}
	l.remove(key)
	l.items[key] = l.order.PushFront(&localEntry{key: key, value: value, expires: sent.Add(ttl)})
	for l.order.Len() > l.max {
		l.remove(entry(l.order.Back()).key)
	}
}

// delete drops keys: they changed in Redis (or may have).
func (l *localLayer) delete(keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	for _, k := range keys {
		l.remove(k)
	}
}

// remove drops one key. l.mu is held.
func (l *localLayer) remove(key string) {
	if el, ok := l.items[key]; ok {
		l.order.Remove(el)
		delete(l.items, key)
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
