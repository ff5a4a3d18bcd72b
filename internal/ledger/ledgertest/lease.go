package ledgertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// Lease checks a ledger.LeaseStore on the store's own clock: one holder at
// a time, renewal, the cursor only its holder moves, takeover after the TTL,
// release, and exactly one winner of a race for a free lease.
func Lease(t *testing.T, ls ledger.LeaseStore) {
	const ttl = 400 * time.Millisecond
	l := &leaseTest{t: t, ls: ls, ctx: context.Background(), name: fmt.Sprintf("lease-%d", time.Now().UnixNano())}
	l.holdAndRenew(ttl)
	l.expireAndTakeOver(ttl)
	l.releaseKeepsCursor()
	l.raceForFreeLease()
}

// leaseTest is one run of Lease: the lease it tests and the calls it makes.
type leaseTest struct {
	t    *testing.T
	ls   ledger.LeaseStore
	ctx  context.Context
	name string
}

func (l *leaseTest) acquire(holder string, ttl time.Duration) (bool, string) {
	l.t.Helper()
	held, cursor, err := l.ls.AcquireLease(l.ctx, l.name, holder, ttl)
	if err != nil {
		l.t.Fatalf("AcquireLease(%s): %v", holder, err)
	}
	return held, cursor
}

func (l *leaseTest) advance(holder, cursor string) bool {
	l.t.Helper()
	ok, err := l.ls.AdvanceLease(l.ctx, l.name, holder, cursor)
	if err != nil {
		l.t.Fatalf("AdvanceLease(%s): %v", holder, err)
	}
	return ok
}

// holdAndRenew: a takes the free lease and moves its cursor to c1, b can
// do neither, and a renews with ttl.
func (l *leaseTest) holdAndRenew(ttl time.Duration) {
	t := l.t
	// Long TTLs where a stalled test machine must not let a lease go.
	if held, cursor := l.acquire("a", time.Hour); !held || cursor != "" {
		t.Fatalf("a on a free lease: held %v cursor %q", held, cursor)
	}
	if held, _ := l.acquire("b", time.Hour); held {
		t.Fatal("b took a lease a holds")
	}
	if !l.advance("a", "c1") {
		t.Fatal("the holder could not advance the cursor")
	}
	if l.advance("b", "x") {
		t.Fatal("b advanced a's cursor")
	}
	// A renewal sets the TTL anew: a short one now.
	if held, cursor := l.acquire("a", ttl); !held || cursor != "c1" {
		t.Fatalf("a renewing: held %v cursor %q", held, cursor)
	}
}

// expireAndTakeOver: a stops renewing; its lease expires on the store's
// clock after ttl, after which a can no longer move the cursor, even before
// another holder took the lease (storing the cursor it holds is still a
// move while it holds); b takes over with the cursor, not before the TTL,
// and moves it to c2.
func (l *leaseTest) expireAndTakeOver(ttl time.Duration) {
	t := l.t
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for l.advance("a", "c1") {
		if time.Now().After(deadline) {
			t.Fatal("a still advances the cursor long after its TTL")
		}
		time.Sleep(20 * time.Millisecond) // polling the store's clock, with a deadline
	}
	if d := time.Since(start); d < ttl/4 {
		t.Fatalf("a could not advance %v after its renewal, before the TTL %v", d, ttl)
	}
	// b takes over once the TTL has run out, not before.
	for {
		held, cursor := l.acquire("b", time.Hour)
		if held {
			if cursor != "c1" {
				t.Fatalf("b took over with cursor %q, want c1", cursor)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b never took over the expired lease")
		}
		time.Sleep(20 * time.Millisecond) // polling the store's clock, with a deadline
	}
	if d := time.Since(start); d < ttl/4 {
		t.Fatalf("b took over %v after a's renewal, before the TTL %v", d, ttl)
	}
	if l.advance("a", "stale") {
		t.Fatal("a advanced the cursor after losing the lease")
	}
	if held, _ := l.acquire("a", ttl); held {
		t.Fatal("a took back a lease b holds")
	}
	if !l.advance("b", "c2") {
		t.Fatal("b could not advance")
	}
}

// releaseKeepsCursor: a release frees the lease at once and keeps the
// cursor; releasing a lease one does not hold does nothing.
func (l *leaseTest) releaseKeepsCursor() {
	t := l.t
	if err := l.ls.ReleaseLease(l.ctx, l.name, "a"); err != nil {
		t.Fatal(err)
	}
	if held, _ := l.acquire("a", time.Hour); held {
		t.Fatal("a's release of b's lease freed it")
	}
	if err := l.ls.ReleaseLease(l.ctx, l.name, "b"); err != nil {
		t.Fatal(err)
	}
	if l.advance("b", "c3") {
		t.Fatal("b advanced after releasing")
	}
	if held, cursor := l.acquire("a", time.Hour); !held || cursor != "c2" {
		t.Fatalf("a after b's release: held %v cursor %q, want c2", held, cursor)
	}
}

// raceForFreeLease: a race of 16 holders for a free lease has exactly one
// winner.
func (l *leaseTest) raceForFreeLease() {
	t := l.t
	race := l.name + "-race"
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins []string
	)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := fmt.Sprintf("h%d", i)
			held, _, err := l.ls.AcquireLease(l.ctx, race, h, time.Hour)
			if err != nil {
				t.Error(err)
			}
			if held {
				mu.Lock()
				wins = append(wins, h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d holders won a race for one lease: %v", len(wins), wins)
	}
}
