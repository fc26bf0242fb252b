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

// set stores value for at most the layer's TTL and at most ttl (the value's
// remaining life in Redis).
func (l *localLayer) set(key string, value []byte, ttl time.Duration, now time.Time) {
	ttl = min(ttl, l.ttl)
	if ttl <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
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
	l.order.Init()
	clear(l.items)
}

func (l *localLayer) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}
