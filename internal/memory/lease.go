package memory

import (
	"context"
	"sync"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.LeaseStore = (*Store)(nil)

// leaseTable keeps the store's leases (ledger.LeaseStore). One process is
// the only user of a memory store, so a lease here only orders deliverers
// within it; it is there so that every store runs the same code.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]*leaseRec
}

type leaseRec struct {
	holder  string
	expires time.Time
	cursor  string
}

func (t *leaseTable) get(name string) *leaseRec {
	if t.m == nil {
		t.m = map[string]*leaseRec{}
	}
	r := t.m[name]
	if r == nil {
		r = &leaseRec{}
		t.m[name] = r
	}
	return r
}

// AcquireLease takes or renews the lease name for holder.
func (s *Store) AcquireLease(_ context.Context, name, holder string, ttl time.Duration) (bool, string, error) {
	now := s.clock()
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.get(name)
	if r.holder != "" && r.holder != holder && now.Before(r.expires) {
		return false, r.cursor, nil
	}
	r.holder, r.expires = holder, now.Add(ttl)
	return true, r.cursor, nil
}

// AdvanceLease stores the lease's cursor when holder holds it.
func (s *Store) AdvanceLease(_ context.Context, name, holder, cursor string) (bool, error) {
	now := s.clock()
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.get(name)
	if r.holder != holder || !now.Before(r.expires) {
		return false, nil
	}
	r.cursor = cursor
	return true, nil
}

// ReleaseLease ends holder's hold on the lease.
func (s *Store) ReleaseLease(_ context.Context, name, holder string) error {
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.get(name); r.holder == holder {
		r.holder, r.expires = "", time.Time{}
	}
	return nil
}
