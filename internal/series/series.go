// Package series keeps the metric series that a request's path looks up,
// so that finding one costs a map read without a lock: a Prometheus vector
// hashes and checks every label value under its lock on each
// WithLabelValues, which showed in the profiles of the request path
// (docs/benchmarks.md, "The default configuration under wrk").
package series

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Cache maps a series' labels, as a comparable key, to the series. Reads
// take no lock; adding a series copies the map, so the keys must come from
// a bounded set (fixed labels, the names of limits that exist). The zero
// Cache is empty and ready.
type Cache[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex // serialises adding and Reset
}

// Get returns the series of k, made by newSeries (a vector's
// WithLabelValues) the first time and kept.
func (c *Cache[K, V]) Get(k K, newSeries func() V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if m := c.m.Load(); m != nil {
		old = *m
	}
	if v, ok := old[k]; ok {
		return v
	}
	v := newSeries()
	next := make(map[K]V, len(old)+1)
	maps.Copy(next, old)
	next[k] = v
	c.m.Store(&next)
	return v
}

// Reset forgets every series kept. Call it after deleting series from
// their vector: a Get that made its series before the deletion has stored
// it by the time Reset returns, and is forgotten with the rest.
func (c *Cache[K, V]) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.Store(nil)
}
