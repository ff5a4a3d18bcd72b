package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
)

// TestQueryBuckets: the client lists who is near the cap with the server's
// query (api.BucketQuery), page after page, and a threshold the limit does
// not list comes back as a problem naming the field above.
func TestQueryBuckets(t *testing.T) {
	c, _ := newBudgetd(t)
	ctx := context.Background()
	if _, err := c.PutLimit(ctx, "cap", client.LimitSpec{Capacity: dec("100"), Period: &client.Period{Every: api.Month}, Thresholds: []string{"50%", "90"}}); err != nil {
		t.Fatal(err)
	}
	for k, cost := range map[string]string{"a": "40", "b": "95", "c": "60", "d/e": "70"} {
		if _, err := c.Fillup(ctx, "cap", k, dec(cost)); err != nil {
			t.Fatal(err)
		}
	}
	all := func(q api.BucketQuery) []string {
		t.Helper()
		var keys []string
		cursor := ""
		for range 10 {
			items, next, err := c.QueryBuckets(ctx, "cap", q, cursor, 1)
			if err != nil {
				t.Fatalf("QueryBuckets(%+v): %v", q, err)
			}
			for _, it := range items {
				keys = append(keys, it.Key)
			}
			if next == "" {
				return keys
			}
			cursor = next
		}
		t.Fatalf("%+v: no end", q)
		return nil
	}
	if got := all(api.BucketQuery{Above: "50%"}); !slices.Equal(got, []string{"b", "c", "d/e"}) {
		t.Errorf("above 50%%: %q", got)
	}
	if got := all(api.BucketQuery{Order: api.OrderUsed}); !slices.Equal(got, []string{"b", "d/e", "c", "a"}) {
		t.Errorf("by used: %q", got)
	}
	if got := all(api.BucketQuery{Above: "90", Order: api.OrderShare}); !slices.Equal(got, []string{"b"}) {
		t.Errorf("above 90 by share: %q", got)
	}
	_, _, err := c.QueryBuckets(ctx, "cap", api.BucketQuery{Above: "80%"}, "", 10)
	var e *client.Error
	if !errors.As(err, &e) || e.Code != "invalid_request" || e.Field != "above" {
		t.Fatalf("an unknown threshold: %v", err)
	}
}
