package webhook

import "time"

// WithoutRelease makes the deliverer stop as if its process died: its
// cursor is not stored and its lease not released when Run's context ends.
func WithoutRelease() Option { return func(d *Deliverer) { d.noRelease = true } }

// WithFailureLogClock sets the clock that spaces the lines of failed
// attempts (WithFailureLog), so that a test decides when the next line is due.
func WithFailureLogClock(now func() time.Time) Option {
	return func(d *Deliverer) { d.failLog.now = now }
}
