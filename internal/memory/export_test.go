package memory

// IdempotencyUse reports how many idempotency records s keeps and their
// estimated bytes.
func (s *Store) IdempotencyUse() (records int, bytes int64) {
	s.idem.mu.Lock()
	defer s.idem.mu.Unlock()
	return len(s.idem.records), s.idem.bytes
}
