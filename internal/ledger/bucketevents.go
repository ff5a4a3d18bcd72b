package ledger

import "context"

// BucketEventStore is an EventStore that can also list one bucket's most
// recent events (the dashboard's view of a bucket). A store that is not one
// answers ErrNotServed for them.
type BucketEventStore interface {
	EventStore
	// BucketEvents returns up to n of the events kept for the bucket ref,
	// newest first. It writes nothing and may be retried.
	BucketEvents(ctx context.Context, ref BucketRef, n int) ([]OutboxEvent, error)
}

// MaxBucketEvents is the most events one call of BucketEvents returns.
const MaxBucketEvents = 100

// BucketEvents returns up to n of the most recent events of the bucket ref
// (threshold crossings and recoveries), newest first. Returns
// ErrLimitNotFound when the limit does not exist and ErrNotServed when the
// store cannot list a bucket's events.
func (s *Service) BucketEvents(ctx context.Context, ref BucketRef, n int) ([]OutboxEvent, error) {
	if err := validateRef(ref); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxBucketEvents {
		return nil, invalid("invalid_request", "limit", "must be a whole number from 1 to %d", MaxBucketEvents)
	}
	if _, err := s.store.GetLimit(ctx, ref.Limit); err != nil {
		return nil, err
	}
	es, ok := EventsOf(s.store)
	if !ok {
		return nil, nil
	}
	bs, ok := es.(BucketEventStore)
	if !ok {
		return nil, ErrNotServed
	}
	return bs.BucketEvents(ctx, ref, n)
}
