package series_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/budgetd/budgetd/internal/series"
)

// TestCacheMakesOnce: from many goroutines at once, each key's series is
// made once and every Get of it returns that one.
func TestCacheMakesOnce(t *testing.T) {
	var c series.Cache[string, *int]
	var made atomic.Int64
	var wg sync.WaitGroup
	got := make([][]*int, 8)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				got[g] = append(got[g], c.Get(fmt.Sprint(i%10), func() *int { made.Add(1); return new(int) }))
			}
		}()
	}
	wg.Wait()
	if made.Load() != 10 {
		t.Fatalf("made %d series for 10 keys", made.Load())
	}
	for g := range got {
		for i, p := range got[g] {
			if p != got[0][i%10] {
				t.Fatalf("goroutine %d, get %d: another series than the first for key %d", g, i, i%10)
			}
		}
	}
}

// TestCacheReset: after Reset every key's series is made again.
func TestCacheReset(t *testing.T) {
	var c series.Cache[int, int]
	n := 0
	mk := func() int { n++; return n }
	if a, b := c.Get(1, mk), c.Get(1, mk); a != 1 || b != 1 {
		t.Fatalf("before Reset: %d, %d", a, b)
	}
	c.Reset()
	if a := c.Get(1, mk); a != 2 {
		t.Fatalf("after Reset: %d, want a new series", a)
	}
}
