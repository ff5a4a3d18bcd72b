// Package ledgertest is the conformance suite that every ledger.Store passes.
// A store's own test file calls Run with a factory that builds a fresh, empty
// store whose clock is pinned to the given Clock.
package ledgertest

import (
	"sync"
	"time"
)

// Clock is a pinned clock for tests. Stores take its Now as their clock hook
// (for PostgreSQL and Redis the pinned instant replaces the server's clock in
// the atomic step). Times are whole microseconds.
//
// A clock set free with Free reads as the zero time: a store's hook then
// falls back to the store's own clock (time.Now, the database clock, Redis
// TIME), read where production reads it, so a test can watch what real time
// does under concurrency.
type Clock struct {
	mu   sync.Mutex
	now  time.Time
	free bool
}

// Free lets the stores use their own clocks from now on (Now reads as the
// zero time).
func (c *Clock) Free() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.free = true
}

// NewClock returns a clock pinned at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the pinned instant, or the zero time when the clock is free.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.free {
		return time.Time{}
	}
	return c.now
}

// Advance moves the clock by d (which may be negative: a clock going back).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d).Truncate(time.Microsecond)
}

// Set pins the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.UTC().Truncate(time.Microsecond)
}
