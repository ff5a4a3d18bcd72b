package webhook

// WithoutRelease makes the deliverer stop as if its process died: its
// cursor is not stored and its lease not released when Run's context ends.
func WithoutRelease() Option { return func(d *Deliverer) { d.noRelease = true } }
