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
	ctx := context.Background()
	name := fmt.Sprintf("lease-%d", time.Now().UnixNano())
	const ttl = 400 * time.Millisecond

	acquire := func(holder string, ttl time.Duration) (bool, string) {
		t.Helper()
		held, cursor, err := ls.AcquireLease(ctx, name, holder, ttl)
		if err != nil {
			t.Fatalf("AcquireLease(%s): %v", holder, err)
		}
		return held, cursor
	}
	advance := func(holder, cursor string) bool {
		t.Helper()
		ok, err := ls.AdvanceLease(ctx, name, holder, cursor)
		if err != nil {
			t.Fatalf("AdvanceLease(%s): %v", holder, err)
		}
		return ok
	}

	// Long TTLs where a stalled test machine must not let a lease go.
	if held, cursor := acquire("a", time.Hour); !held || cursor != "" {
		t.Fatalf("a on a free lease: held %v cursor %q", held, cursor)
	}
	if held, _ := acquire("b", time.Hour); held {
		t.Fatal("b took a lease a holds")
	}
	if !advance("a", "c1") {
		t.Fatal("the holder could not advance the cursor")
	}
	if advance("b", "x") {
		t.Fatal("b advanced a's cursor")
	}
	// A renewal sets the TTL anew: a short one now.
	if held, cursor := acquire("a", ttl); !held || cursor != "c1" {
		t.Fatalf("a renewing: held %v cursor %q", held, cursor)
	}

	// a stops renewing: its lease expires on the store's clock, after which
	// a can no longer move the cursor, even before another holder took the
	// lease (storing the cursor it holds is still a move while it holds).
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for advance("a", "c1") {
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
		held, cursor := acquire("b", time.Hour)
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
	if advance("a", "stale") {
		t.Fatal("a advanced the cursor after losing the lease")
	}
	if held, _ := acquire("a", ttl); held {
		t.Fatal("a took back a lease b holds")
	}
	if !advance("b", "c2") {
		t.Fatal("b could not advance")
	}

	// A release frees the lease at once and keeps the cursor; releasing a
	// lease one does not hold does nothing.
	if err := ls.ReleaseLease(ctx, name, "a"); err != nil {
		t.Fatal(err)
	}
	if held, _ := acquire("a", time.Hour); held {
		t.Fatal("a's release of b's lease freed it")
	}
	if err := ls.ReleaseLease(ctx, name, "b"); err != nil {
		t.Fatal(err)
	}
	if advance("b", "c3") {
		t.Fatal("b advanced after releasing")
	}
	if held, cursor := acquire("a", time.Hour); !held || cursor != "c2" {
		t.Fatalf("a after b's release: held %v cursor %q, want c2", held, cursor)
	}

	// A race for a free lease has exactly one winner.
	race := name + "-race"
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
			held, _, err := ls.AcquireLease(ctx, race, h, time.Hour)
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
