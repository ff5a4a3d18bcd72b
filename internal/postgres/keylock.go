package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// keyLocks serializes, inside this process, the multi-bucket Fillups that
// share a bucket when the store runs at SERIALIZABLE. There a call that waits
// for a bucket row's lock fails with a serialization failure as soon as the
// holder commits (its snapshot is older than the row), so calls on hot
// buckets fail and retry in waves, and an unlucky one can lose every round
// until its timeout. Waiting here instead, in arrival order (a channel's
// senders are served first come, first served), leaves the database only the
// conflicts with other processes. Locks are taken in (limit, key) order, as
// the database takes the rows, so they cannot deadlock.
type keyLocks struct {
	mu sync.Mutex
	m  map[ledger.BucketRef]*keyLock
}

type keyLock struct {
	token chan struct{} // holds one value while the lock is held
	refs  int           // holders and waiters
}

// lock takes the locks of refs, waiting until deadline at most; the
// returned function releases them.
func (k *keyLocks) lock(ctx context.Context, deadline time.Time, refs []ledger.BucketRef) (func(), error) {
	refs = slices.Clone(refs)
	slices.SortFunc(refs, func(a, b ledger.BucketRef) int {
		return cmp.Or(cmp.Compare(a.Limit, b.Limit), cmp.Compare(a.Key, b.Key))
	})
	refs = slices.Compact(refs)
	k.mu.Lock()
	if k.m == nil {
		k.m = map[ledger.BucketRef]*keyLock{}
	}
	locks := make([]*keyLock, len(refs))
	for i, r := range refs {
		l := k.m[r]
		if l == nil {
			l = &keyLock{token: make(chan struct{}, 1)}
			k.m[r] = l
		}
		l.refs++
		locks[i] = l
	}
	k.mu.Unlock()
	held := 0
	release := func() {
		for i := range held {
			<-locks[i].token
		}
		k.mu.Lock()
		for i, r := range refs {
			if locks[i].refs--; locks[i].refs == 0 {
				delete(k.m, r)
			}
		}
		k.mu.Unlock()
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for _, l := range locks {
		select {
		case l.token <- struct{}{}:
			held++
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		case <-t.C:
			release()
			return nil, fmt.Errorf("no answer within the timeout (waiting for a concurrent call of the same buckets): %w", ledger.ErrUnavailable)
		}
	}
	return release, nil
}
