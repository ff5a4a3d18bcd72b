package postgres

import (
	"context"
	"errors"
	"sync"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
)

// holdRefs remembers the bucket of the holds this process reserved, so that
// a Commit or Release resolves the bucket's terms (terms.go) without
// reading the hold first: a hold never changes bucket. A hold it does not
// know costs one read (holdRef). It keeps at most maxHoldRefs holds and
// starts over when full: forgetting only costs that read.
type holdRefs struct {
	mu sync.Mutex
	m  map[string]ledger.BucketRef
}

// maxHoldRefs bounds holdRefs.
const maxHoldRefs = 1 << 16

func (h *holdRefs) put(id string, ref ledger.BucketRef) {
	h.mu.Lock()
	if h.m == nil || len(h.m) >= maxHoldRefs {
		h.m = make(map[string]ledger.BucketRef)
	}
	h.m[id] = ref
	h.mu.Unlock()
}

func (h *holdRefs) get(id string) (ledger.BucketRef, bool) {
	h.mu.Lock()
	ref, ok := h.m[id]
	h.mu.Unlock()
	return ref, ok
}

func (h *holdRefs) drop(id string) {
	h.mu.Lock()
	delete(h.m, id)
	h.mu.Unlock()
}

// holdRef is the bucket of the hold id; ok is false when no such hold
// exists (budgetd_resolve then answers for it).
func (s *Store) holdRef(ctx context.Context, id string) (ref ledger.BucketRef, ok bool, err error) {
	if ref, ok := s.holds.get(id); ok {
		return ref, true, nil
	}
	err = s.pool.QueryRow(ctx, `SELECT l.name, h.key FROM holds h JOIN limits l ON l.id = h.limit_id WHERE h.id = $1`, id).
		Scan(&ref.Limit, &ref.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return ref, false, nil
	}
	if err != nil {
		return ref, false, err
	}
	s.holds.put(id, ref)
	return ref, true, nil
}
