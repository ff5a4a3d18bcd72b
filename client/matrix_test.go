package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
)

// Every operation of the client × every limit kind × every store: create,
// read, list, CanAccept, state, Fillup, multi-bucket Fillup, Reserve with
// Commit and with Release, Drain, holds, history with the meta of each
// event, bucket list and delete.
func TestMatrix(t *testing.T) {
	kinds := []struct {
		name     string
		spec     client.LimitSpec
		kind     api.Kind
		periodic bool
	}{
		{"leak", client.LimitSpec{Capacity: dec("100"), Leak: &client.Leak{Amount: dec("1"), Per: time.Hour}}, api.KindLeak, false},
		{"month", client.LimitSpec{Capacity: dec("100"), Period: &client.Period{Every: api.Month, TZ: "Europe/Berlin"}}, api.KindPeriod, true},
		{"week", client.LimitSpec{Capacity: dec("100"), Period: &client.Period{Every: api.Week, TZ: "America/New_York", StartDay: 7}}, api.KindPeriod, true},
		{"day", client.LimitSpec{Capacity: dec("100"), Period: &client.Period{Every: api.Day}}, api.KindPeriod, true},
		{"window", client.LimitSpec{Capacity: dec("100"), Window: &client.Window{Length: 720 * time.Hour}}, api.KindWindow, false},
	}
	eachStore(t, func(t *testing.T, c *client.Client) {
		ctx := context.Background()
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) {
				must := func(what string, err error) {
					t.Helper()
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
				bounded := func(what string, start, resets *api.Time) {
					t.Helper()
					if (resets != nil) != k.periodic || (start != nil) != k.periodic || (k.periodic && !resets.After(start.Time)) {
						t.Errorf("%s: period %v – %v", what, start, resets)
					}
				}
				name := "m-" + k.name
				l, err := c.PutLimit(ctx, name, k.spec)
				must("PutLimit", err)
				if l.Kind() != k.kind || (l.Period != nil) != k.periodic {
					t.Fatalf("PutLimit: %+v", l)
				}
				if k.kind == api.KindWindow && (l.Window.Length != api.Duration(720*time.Hour) || l.Window.Precision != api.Duration(time.Hour)) {
					t.Fatalf("PutLimit of a window: %+v (the default precision of 720h is 1h)", l.Window)
				}
				got, err := c.GetLimit(ctx, name)
				must("GetLimit", err)
				if got.Kind() != l.Kind() || !got.Capacity.Equal(l.Capacity) {
					t.Errorf("GetLimit: %+v", got)
				}
				d, err := c.CanAccept(ctx, name, "{t}a", dec("1"))
				must("CanAccept", err)
				bounded("CanAccept", d.PeriodStart, d.ResetsAt)
				d, err = c.Fillup(ctx, name, "{t}a", dec("10"), client.Meta(map[string]string{"op": "fillup"}))
				must("Fillup", err)
				bounded("Fillup", d.PeriodStart, d.ResetsAt)
				m, err := c.FillupMany(ctx, []client.Item{
					{Limit: name, Key: "{t}a", Cost: dec("1"), Meta: map[string]string{"op": "multi"}},
					{Limit: name, Key: "{t}b", Cost: dec("1")},
				}, client.Meta(map[string]string{"op": "multi-call"}))
				must("FillupMany", err)
				if !m.Accepted {
					t.Fatalf("FillupMany: %+v", m)
				}
				bounded("FillupMany", m.Items[1].PeriodStart, m.Items[1].ResetsAt)
				h, dd, err := c.Reserve(ctx, name, "{t}a", dec("5"), time.Minute, client.Meta(map[string]string{"op": "reserve"}))
				must("Reserve", err)
				bounded("Reserve", dd.PeriodStart, dd.ResetsAt)
				holds, err := c.Holds(ctx, name, "{t}a")
				must("Holds", err)
				if len(holds) != 1 || holds[0].ID != h.ID {
					t.Errorf("Holds: %+v", holds)
				}
				amt := dec("4")
				r, err := c.Commit(ctx, h.ID, &amt, false, client.Meta(map[string]string{"op": "commit"}))
				must("Commit", err)
				bounded("Commit", r.Bucket.PeriodStart, r.Bucket.ResetsAt)
				if r.Reservation.State != api.Committed || !r.Reservation.CommittedAmount.Equal(amt) {
					t.Errorf("Commit: %+v", r)
				}
				h, _, err = c.Reserve(ctx, name, "{t}a", dec("3"), 0)
				must("Reserve", err)
				r, err = c.Release(ctx, h.ID, client.Meta(map[string]string{"op": "release"}))
				must("Release", err)
				if r.Reservation.State != api.Released {
					t.Errorf("Release: %+v", r)
				}
				dr, err := c.Drain(ctx, name, "{t}a", dec("2"), client.Meta(map[string]string{"op": "drain"}))
				must("Drain", err)
				bounded("Drain", dr.PeriodStart, dr.ResetsAt)
				if !dr.Removed.Equal(dec("2")) {
					t.Errorf("Drain removed %s", dr.Removed)
				}
				b, err := c.Bucket(ctx, name, "{t}a")
				must("Bucket", err)
				bounded("Bucket", b.PeriodStart, b.ResetsAt)
				bs, _, err := c.ListBuckets(ctx, name, "", 0)
				must("ListBuckets", err)
				if len(bs) != 2 {
					t.Errorf("ListBuckets: %+v", bs)
				}
				for _, b := range bs {
					bounded("ListBuckets", b.PeriodStart, b.ResetsAt)
				}
				es, _, err := c.History(ctx, name, "{t}a", "", 0)
				must("History", err)
				want := map[api.Event][]string{
					api.EventFillup: {"fillup", "multi"}, api.EventReserved: {"reserve", ""}, api.EventCommitted: {"commit"},
					api.EventReleased: {"release"}, api.EventDrain: {"drain"},
				}
				seen := map[api.Event][]string{}
				for _, e := range es {
					seen[e.Event] = append(seen[e.Event], e.Meta["op"])
				}
				for ev, ops := range want {
					for _, op := range ops {
						found := false
						for _, s := range seen[ev] {
							found = found || s == op
						}
						if !found {
							t.Errorf("history: no %s entry with meta op=%q (entries %v)", ev, op, seen)
						}
					}
				}
				must("DeleteLimit", c.DeleteLimit(ctx, name))
				if _, err := c.GetLimit(ctx, name); !client.IsCode(err, api.CodeLimitNotFound) {
					t.Errorf("GetLimit after delete: %v", err)
				}
			})
		}
	})
}
