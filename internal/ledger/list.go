package ledger

import (
	"context"
	"encoding/base64"
)

// ListedBucket is one bucket of a listing: its key and its state now.
type ListedBucket struct {
	Key string
	BucketState
}

// ListBuckets lists up to n of the limit's buckets in byte order of key,
// with keys after the key that cursor names ("" for the first page). It
// returns the cursor of the next page, "" at the end. It writes nothing.
func (s *Service) ListBuckets(ctx context.Context, limit, cursor string, n int) ([]ListedBucket, string, error) {
	if err := ValidateName(limit); err != nil {
		return nil, "", ErrLimitNotFound // as GetLimit: a name that cannot exist is not found
	}
	if n < 1 || n > MaxPage {
		return nil, "", invalid(CodeInvalidRequest, "limit", "must be a whole number from 1 to %d", MaxPage)
	}
	after, err := ParseBucketCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	snaps, err := s.store.ListBuckets(ctx, limit, after, n+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(snaps) > n {
		snaps = snaps[:n]
		next = BucketCursor(snaps[n-1].Key)
	}
	out := make([]ListedBucket, len(snaps))
	for i, b := range snaps {
		out[i] = ListedBucket{Key: b.Key, BucketState: StateOf(b.Snapshot)}
	}
	return out, next, nil
}

// ListHolds lists a bucket's active holds, oldest first. It writes nothing.
func (s *Service) ListHolds(ctx context.Context, ref BucketRef) ([]Reservation, error) {
	if err := validateRef(ref); err != nil {
		return nil, err
	}
	return s.store.ListHolds(ctx, ref)
}

// BucketCursor is the cursor of a bucket listing that resumes after key: the
// key in unpadded base64url, so that any key travels safely in a query
// string.
func BucketCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// ParseBucketCursor returns the key a bucket listing cursor names, "" for
// the empty cursor. A cursor that is not one BucketCursor makes is
// invalid_request on field cursor.
func ParseBucketCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err != nil || len(cursor) > 2*MaxKeyBytes || ValidateKey(string(b)) != nil {
		return "", invalid(CodeInvalidRequest, "cursor", "malformed cursor")
	}
	return string(b), nil
}
