package ledger

// WithWriteHook sets a function the Service calls after each write it made
// on a limit that has thresholds (a Fillup, Reserve, Commit, Release or
// Drain that the store accepted and did not replay): such a write may have
// put events in the outbox. The webhook deliverer passes its Nudge, so that
// it reads the outbox at once instead of at its next poll. f is called on
// the caller's goroutine after the store answered; it must not block.
func WithWriteHook(f func()) Option { return func(s *Service) { s.onWrite = f } }

// wrote calls the write hook when l has thresholds and the call wrote.
func (s *Service) wrote(l Limit, wrote bool) {
	if s.onWrite != nil && wrote && len(l.Thresholds) > 0 {
		s.onWrite()
	}
}
