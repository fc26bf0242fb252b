// Package readmostly is a map for keys that are added rarely and read on
// every request, such as the metric children of an app's routes.
//
// A read is one lock-free lookup in a plain Go map, hashed by the key
// type's own hash (a sync.Map hashes keys as interfaces, which is slower
// for struct keys). As in sync.Map, a dirty copy replaces the read map
// once lookups have missed it as many times as it has keys, so adding n
// keys costs O(n).
package readmostly

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Map is a map from K to V for keys added rarely. Its zero value is an
// empty map ready to use; it must not be copied after first use.
type Map[K comparable, V any] struct {
	read   atomic.Pointer[map[K]V] // never written once stored
	mu     sync.Mutex
	dirty  map[K]V // nil, or every key of read and those added since
	misses int     // lookups that missed read since dirty was made
}

// Load returns the value of k if it is in the read map, without a lock. A
// key added lately may be only in the dirty map: Load then reports false,
// and LoadOrCreate finds it.
func (m *Map[K, V]) Load(k K) (V, bool) {
	if r := m.read.Load(); r != nil {
		v, ok := (*r)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// LoadOrCreate returns the value of k, adding create(k) if k has none.
// create runs under the map's lock, once per key.
func (m *Map[K, V]) LoadOrCreate(k K, create func(K) V) V {
	if v, ok := m.Load(k); ok {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	read := m.read.Load()
	if read != nil {
		if v, ok := (*read)[k]; ok { // promoted while this one waited for the lock
			return v
		}
	}
	v, ok := m.dirty[k]
	if !ok {
		if m.dirty == nil {
			m.dirty = make(map[K]V, m.lenLocked()+1)
			if read != nil {
				maps.Copy(m.dirty, *read)
			}
		}
		v = create(k)
		m.dirty[k] = v
	}
	if m.misses++; m.misses >= len(m.dirty) {
		promoted := m.dirty
		m.read.Store(&promoted)
		m.dirty, m.misses = nil, 0
	}
	return v
}

// Len returns the number of keys.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirty != nil {
		return len(m.dirty)
	}
	return m.lenLocked()
}

func (m *Map[K, V]) lenLocked() int {
	if r := m.read.Load(); r != nil {
		return len(*r)
	}
	return 0
}
