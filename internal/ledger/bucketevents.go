package ledger

import "context"

// MaxBucketEvents is the most events one call of BucketEvents returns.
const MaxBucketEvents = 100

// BucketEvents returns up to n of the most recent events of the bucket ref
// (threshold crossings and recoveries), newest first. Returns
// ErrLimitNotFound when the limit does not exist.
func (s *Service) BucketEvents(ctx context.Context, ref BucketRef, n int) ([]OutboxEvent, error) {
	if err := validateRef(ref); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxBucketEvents {
		return nil, invalid(CodeInvalidRequest, "limit", "must be a whole number from 1 to %d", MaxBucketEvents)
	}
	if _, err := s.store.GetLimit(ctx, ref.Limit); err != nil {
		return nil, err
	}
	return s.store.BucketEvents(ctx, ref, n)
}
