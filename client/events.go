package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/budgetd/budgetd/api"
)

// Event is an event a write emitted, as GET /v1/events lists it and a
// webhook sends it: a threshold of a bucket crossed or recovered, written
// in the same atomic step as the write. It is the document's own type.
type Event = api.WebhookEvent

// EventOf returns d: Event is api.WebhookEvent.
//
// Deprecated: use the api.WebhookEvent itself; kept for callers outside
// this package (bench/chaos) until they drop the call.
func EventOf(d api.WebhookEvent) Event { return d }

// Events lists up to n events (0: budgetd's default page) after the cursor
// after ("" for the oldest kept) and returns the cursor to continue from:
// after the last event listed, or after itself when there is nothing new
// (poll again with it later). Every event is listed once across pages, in
// the order of the writes for each bucket.
func (c *Client) Events(ctx context.Context, after string, n int) ([]Event, string, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if n > 0 {
		q.Set("limit", strconv.Itoa(n))
	}
	a, err := c.do(ctx, http.MethodGet, "/v1/events", q, nil, callOpts{})
	if err != nil {
		return nil, "", err
	}
	var p api.EventPage
	if err := decode(a, &p); err != nil {
		return nil, "", err
	}
	return p.Items, p.NextCursor, nil
}

// BucketEvents lists up to n (0: budgetd's default of 20; at most 100) of
// the most recent events of the bucket key of limit, newest first, each as
// Events lists it. It is a view for people; a consumer that must see every
// event once reads Events.
func (c *Client) BucketEvents(ctx context.Context, limit, key string, n int) ([]Event, error) {
	if err := checkBucket("", limit, key); err != nil {
		return nil, err
	}
	q := url.Values{}
	if n > 0 {
		q.Set("limit", strconv.Itoa(n))
	}
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key)+"/events", q, nil, callOpts{})
	if err != nil {
		return nil, err
	}
	var l api.BucketEventList
	if err := decode(a, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// AllEvents iterates over the events after the cursor after, page by page,
// until there is nothing new; the cursor to poll with next is that of the
// last event yielded. It stops at the first error, which it yields.
func (c *Client) AllEvents(ctx context.Context, after string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			page, next, err := c.Events(ctx, after, 0)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if len(page) == 0 || next == after {
				return
			}
			after = next
		}
	}
}
