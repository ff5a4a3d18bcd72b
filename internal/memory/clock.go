package memory

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// StepTolerance is how far the wall clock may drift from the store's clock
// before the store reports a clock step.
const StepTolerance = time.Second

// storeClock is the memory store's "now". The wall clock says where the
// store's timeline starts; from then on the timeline advances by the elapsed
// time of a monotonic clock. A step of the wall clock (set by hand, an NTP
// step, a VM restored from a snapshot) therefore leaks no bucket, expires no
// hold and locks no bucket out: after a step forward and its correction a
// bucket has leaked exactly the time that really passed. A step is detected by
// comparing the two clocks on every reading, logged and counted
// (budgetd_memory_clock_steps_total).
//
// With time.Now both readings come from one call: Go's time.Now carries a
// monotonic reading, and Time.Sub uses it. With a pinned clock (WithClock)
// the readings have none, so the pinned times are the timeline exactly.
type storeClock struct {
	// read returns the wall time and the monotonic time elapsed since an
	// arbitrary origin, taken together.
	read func() (wall time.Time, elapsed time.Duration)
	log  *slog.Logger

	base     time.Time     // the store's time at baseMono: UTC, whole µs, no monotonic reading
	baseMono time.Duration // the monotonic reading at base
	offset   atomic.Int64  // wall − store time in ns when last checked
	steps    atomic.Int64  // steps detected
}

// start fixes the timeline's origin at the clock's first reading.
func (c *storeClock) start() {
	wall, mono := c.read()
	c.base = wall.Round(0).UTC().Truncate(time.Microsecond)
	c.baseMono = mono
	c.offset.Store(int64(wall.Round(0).Sub(c.base)))
}

// now returns the store's time for one operation, in whole microseconds, and
// reports a step of the wall clock when it sees one.
func (c *storeClock) now() time.Time {
	wall, mono := c.read()
	t := c.base.Add((mono - c.baseMono).Truncate(time.Microsecond))
	// The wall reading is compared, never used as elapsed time, so its
	// monotonic reading is dropped here on purpose.
	off := int64(wall.Round(0).Sub(t))
	if prev := c.offset.Load(); abs(off-prev) > int64(StepTolerance) && c.offset.CompareAndSwap(prev, off) {
		c.steps.Add(1)
		c.log.Warn("the wall clock stepped; the memory store keeps measuring time monotonically",
			"step", time.Duration(off-prev).String(), "wall", wall.Round(0).UTC(), "store_time", t,
			"wall_minus_store", time.Duration(off).String())
	}
	return t
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// systemClock reads time.Now once: the wall time and, through its monotonic
// reading, the time elapsed since origin.
func systemClock(origin time.Time) func() (time.Time, time.Duration) {
	return func() (time.Time, time.Duration) {
		n := time.Now()
		return n, n.Sub(origin)
	}
}

// pinnedClock makes now both readings: elapsed time is measured on now's
// own readings (monotonic when it has them, its wall time when pinned). A
// zero reading (a test's clock set free) reads time.Now instead.
func pinnedClock(now func() time.Time, origin time.Time) func() (time.Time, time.Duration) {
	return func() (time.Time, time.Duration) {
		n := now()
		if n.IsZero() {
			n = time.Now()
		}
		return n, n.Sub(origin)
	}
}
