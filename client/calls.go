package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

// PutLimit creates or updates the limit name: a leaky bucket (spec.Leak),
// a calendar budget (spec.Period) or a rolling window (spec.Window), and
// returns the limit document budgetd answered. Buckets keep their level
// and holds across an update. A spec budgetd would refuse is refused
// before sending (an *Error with Status 0).
func (c *Client) PutLimit(ctx context.Context, name string, spec LimitSpec) (api.Limit, error) {
	if err := api.CheckName("name", name); err != nil {
		return api.Limit{}, refused(err)
	}
	body := spec.doc()
	if err := body.Validate(); err != nil {
		return api.Limit{}, refused(err)
	}
	a, err := c.do(ctx, http.MethodPut, "/v1/limits/"+esc(name), nil, body, callOpts{})
	if err != nil {
		return api.Limit{}, err
	}
	var d api.Limit
	err = decode(a, &d)
	return d, err
}

// GetLimit reads the limit name; an unknown name is an *Error with Code
// limit_not_found.
func (c *Client) GetLimit(ctx context.Context, name string) (api.Limit, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/limits/"+esc(name), nil, nil, callOpts{})
	if err != nil {
		return api.Limit{}, err
	}
	var d api.Limit
	err = decode(a, &d)
	return d, err
}

// ListLimits returns up to n limits (0: the server's default) ordered by
// name, after cursor (""; the first page), and the cursor of the next page
// ("" at the end).
func (c *Client) ListLimits(ctx context.Context, cursor string, n int) ([]api.Limit, string, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/limits", pageQuery(cursor, n), nil, callOpts{})
	if err != nil {
		return nil, "", err
	}
	var p api.Page[api.Limit]
	if err := decode(a, &p); err != nil {
		return nil, "", err
	}
	return p.Items, p.Next(), nil
}

// DeleteLimit removes the limit name with its buckets, holds and history.
func (c *Client) DeleteLimit(ctx context.Context, name string) error {
	a, err := c.do(ctx, http.MethodDelete, "/v1/limits/"+esc(name), nil, nil, callOpts{})
	if err != nil {
		return err
	}
	return decode(a, nil)
}

// Bucket returns the state of the bucket (limit, key); a bucket never
// written is empty with a nil UpdatedAt.
func (c *Client) Bucket(ctx context.Context, limit, key string) (api.BucketState, error) {
	if err := checkBucket("", limit, key); err != nil {
		return api.BucketState{}, err
	}
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key), nil, nil, callOpts{})
	if err != nil {
		return api.BucketState{}, err
	}
	var d api.BucketState
	err = decode(a, &d)
	return d, err
}

// ListBuckets returns up to n buckets of limit that the store holds, in
// key order, after cursor, and the next page's cursor ("" at the end).
func (c *Client) ListBuckets(ctx context.Context, limit, cursor string, n int) ([]api.BucketListItem, string, error) {
	return c.QueryBuckets(ctx, limit, api.BucketQuery{}, cursor, n)
}

// LimitCounts returns the exact number of the limit's buckets (those a full
// ListBuckets shows) and of their active holds, counted by the store at
// one instant (At). It costs a pass over the limit's buckets, on Redis a
// SCAN of the keyspace: a view for people, not for every decision. An
// unknown limit is an *Error with Code limit_not_found.
func (c *Client) LimitCounts(ctx context.Context, limit string) (api.LimitCounts, error) {
	if err := api.CheckName("limit", limit); err != nil {
		return api.LimitCounts{}, refused(err)
	}
	a, err := c.do(ctx, http.MethodGet, "/v1/limits/"+esc(limit)+"/counts", nil, nil, callOpts{})
	if err != nil {
		return api.LimitCounts{}, err
	}
	var n api.LimitCounts
	err = decode(a, &n)
	return n, err
}

// QueryBuckets is ListBuckets that keeps the buckets past the threshold
// q.Above (one of the limit's, as "80%" or an amount) and orders them by
// q.Order: by key, or highest first by used or by share of the capacity.
// The next page's cursor is for the same query only.
func (c *Client) QueryBuckets(ctx context.Context, limit string, q api.BucketQuery, cursor string, n int) ([]api.BucketListItem, string, error) {
	v := pageQuery(cursor, n)
	if q.Above != "" {
		v.Set("above", q.Above)
	}
	if q.Order != "" {
		v.Set("order", string(q.Order))
	}
	a, err := c.do(ctx, http.MethodGet, "/v1/limits/"+esc(limit)+"/buckets", v, nil, callOpts{})
	if err != nil {
		return nil, "", err
	}
	var p api.Page[api.BucketListItem]
	if err := decode(a, &p); err != nil {
		return nil, "", err
	}
	return p.Items, p.Next(), nil
}

// CanAccept asks whether a Fillup of cost would be accepted now (GET
// …/buckets/{key}/can-accept). It changes nothing.
func (c *Client) CanAccept(ctx context.Context, limit, key string, cost decimal.Decimal) (Decision, error) {
	if err := checkBucket("", limit, key); err != nil {
		return Decision{}, err
	}
	if err := checkAmount("cost", cost); err != nil {
		return Decision{}, err
	}
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key)+"/can-accept", url.Values{"cost": {cost.String()}}, nil, callOpts{})
	if err != nil {
		return Decision{}, err
	}
	return decisionOf(a)
}

// Fillup adds cost to the bucket if it fits: an accepted or denied
// Decision, never an error for a denial. The Meta option is stored on the
// history entry.
func (c *Client) Fillup(ctx context.Context, limit, key string, cost decimal.Decimal, opts ...CallOption) (Decision, error) {
	if err := checkBucket("", limit, key); err != nil {
		return Decision{}, err
	}
	o := applyOpts(opts)
	if err := checkAmount("cost", cost); err != nil {
		return Decision{}, err
	}
	if err := checkMeta("meta", o.meta); err != nil {
		return Decision{}, err
	}
	a, err := c.do(ctx, http.MethodPost, bucketPath(limit, key)+"/fillup", nil, api.FillupRequest{Cost: cost, Meta: o.meta}, o)
	if err != nil {
		return Decision{}, err
	}
	return decisionOf(a)
}

// FillupMany charges every item or none (per user + per team + global): one
// multi-bucket Fillup of up to 64 items. An item's Meta, or else the Meta
// option, is stored on the item's history entry.
func (c *Client) FillupMany(ctx context.Context, items []Item, opts ...CallOption) (MultiDecision, error) {
	o := applyOpts(opts)
	if len(items) == 0 || len(items) > api.MaxItems {
		return MultiDecision{}, &Error{Code: api.CodeInvalidRequest, Field: "items", Detail: "between 1 and 64 items are allowed"}
	}
	body := api.MultiFillupRequest{Items: make([]api.MultiFillupItem, len(items))}
	for i, it := range items {
		at := "items[" + strconv.Itoa(i) + "]."
		meta := it.Meta
		if meta == nil {
			meta = o.meta
		}
		if err := checkBucket(at, it.Limit, it.Key); err != nil {
			return MultiDecision{}, err
		}
		if err := checkAmount(at+"cost", it.Cost); err != nil {
			return MultiDecision{}, err
		}
		if err := checkMeta(at+"meta", meta); err != nil {
			return MultiDecision{}, err
		}
		body.Items[i] = api.MultiFillupItem{Limit: it.Limit, Key: it.Key, Cost: it.Cost, Meta: meta}
	}
	a, err := c.do(ctx, http.MethodPost, "/v1/fillup", nil, body, o)
	if err != nil {
		return MultiDecision{}, err
	}
	var d api.MultiFillupResult
	if err := decode(a, &d, http.StatusTooManyRequests); err != nil {
		return MultiDecision{}, err
	}
	out := MultiDecision{MultiFillupResult: d, RateLimitPolicy: a.header.Get("RateLimit-Policy"), RateLimit: a.header.Get("RateLimit")}
	never := false
	for _, it := range d.Items {
		never = never || it.NeverFits
		out.RetryAfter = max(out.RetryAfter, it.RetryAfterDuration())
	}
	if never {
		out.RetryAfter = 0
	}
	return out, nil
}

// Drain lowers the bucket's level by amount (clamped at zero): refunds and
// corrections. The Meta option is stored on the history entry.
func (c *Client) Drain(ctx context.Context, limit, key string, amt decimal.Decimal, opts ...CallOption) (api.Drained, error) {
	if err := checkBucket("", limit, key); err != nil {
		return api.Drained{}, err
	}
	o := applyOpts(opts)
	if err := checkAmount("amount", amt); err != nil {
		return api.Drained{}, err
	}
	if err := checkMeta("meta", o.meta); err != nil {
		return api.Drained{}, err
	}
	a, err := c.do(ctx, http.MethodPost, bucketPath(limit, key)+"/drain", nil, api.DrainRequest{Amount: amt, Meta: o.meta}, o)
	if err != nil {
		return api.Drained{}, err
	}
	var d api.Drained
	err = decode(a, &d)
	return d, err
}

// Reserve holds amount in the bucket for ttl (0: the server's default, 5m)
// when it fits. When accepted, the hold is returned with the decision (the
// two halves of budgetd's api.Reserved answer); when denied, the hold is
// nil. The Meta option is stored on the history entry.
func (c *Client) Reserve(ctx context.Context, limit, key string, amt decimal.Decimal, ttl time.Duration, opts ...CallOption) (*api.Reservation, Decision, error) {
	if err := checkBucket("", limit, key); err != nil {
		return nil, Decision{}, err
	}
	o := applyOpts(opts)
	if err := checkAmount("amount", amt); err != nil {
		return nil, Decision{}, err
	}
	if ttl < 0 || ttl%time.Microsecond != 0 {
		return nil, Decision{}, &Error{Code: api.CodeInvalidDuration, Field: "ttl", Detail: ttl.String() + " is not a positive whole number of microseconds"}
	}
	if err := checkMeta("meta", o.meta); err != nil {
		return nil, Decision{}, err
	}
	body := api.ReserveRequest{Amount: amt, TTL: api.Duration(ttl), Meta: o.meta}
	a, err := c.do(ctx, http.MethodPost, bucketPath(limit, key)+"/reservations", nil, body, o)
	if err != nil {
		return nil, Decision{}, err
	}
	dec, err := decisionOf(a)
	if err != nil || !dec.Accepted {
		return nil, dec, err
	}
	var r api.Reserved
	if err := decode(a, &r); err != nil {
		return nil, Decision{}, err
	}
	return &r.Reservation, dec, nil
}

// Commit ends the hold id and charges amt (nil: the held amount). A larger
// amount than the hold is refused (exceeds_hold) unless overrun is true.
// Refusals are *Error values: reservation_expired (410),
// reservation_closed (409), exceeds_hold (422). The Meta option is stored
// on the history entry.
func (c *Client) Commit(ctx context.Context, id string, amt *decimal.Decimal, overrun bool, opts ...CallOption) (api.Resolved, error) {
	o := applyOpts(opts)
	if amt != nil {
		if err := checkAmount("amount", *amt); err != nil {
			return api.Resolved{}, err
		}
	}
	if err := checkMeta("meta", o.meta); err != nil {
		return api.Resolved{}, err
	}
	return c.resolve(ctx, id, "commit", api.CommitRequest{Amount: amt, Overrun: overrun, Meta: o.meta}, o)
}

// Release ends the hold id without charging. The Meta option is stored on
// the history entry.
func (c *Client) Release(ctx context.Context, id string, opts ...CallOption) (api.Resolved, error) {
	o := applyOpts(opts)
	if err := checkMeta("meta", o.meta); err != nil {
		return api.Resolved{}, err
	}
	return c.resolve(ctx, id, "release", api.ReleaseRequest{Meta: o.meta}, o)
}

func (c *Client) resolve(ctx context.Context, id, verb string, body any, o callOpts) (api.Resolved, error) {
	if id == "" {
		return api.Resolved{}, &Error{Code: api.CodeReservationNotFound, Field: "id", Detail: "the hold id is empty"}
	}
	a, err := c.do(ctx, http.MethodPost, "/v1/reservations/"+esc(id)+"/"+verb, nil, body, o)
	if err != nil {
		return api.Resolved{}, err
	}
	var d api.Resolved
	err = decode(a, &d)
	return d, err
}

// Reservation reads the hold id as it is now.
func (c *Client) Reservation(ctx context.Context, id string) (api.Reservation, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/reservations/"+esc(id), nil, nil, callOpts{})
	if err != nil {
		return api.Reservation{}, err
	}
	var d api.Reservation
	err = decode(a, &d)
	return d, err
}

// Holds lists the active holds of the bucket (limit, key).
func (c *Client) Holds(ctx context.Context, limit, key string) ([]api.Reservation, error) {
	if err := checkBucket("", limit, key); err != nil {
		return nil, err
	}
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key)+"/reservations", nil, nil, callOpts{})
	if err != nil {
		return nil, err
	}
	var p api.ReservationList
	if err := decode(a, &p); err != nil {
		return nil, err
	}
	return p.Items, nil
}

// History lists up to n entries of the bucket, newest first, after cursor,
// and the next page's cursor ("" at the end).
func (c *Client) History(ctx context.Context, limit, key, cursor string, n int) ([]api.HistoryEntry, string, error) {
	if err := checkBucket("", limit, key); err != nil {
		return nil, "", err
	}
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key)+"/history", pageQuery(cursor, n), nil, callOpts{})
	if err != nil {
		return nil, "", err
	}
	var p api.Page[api.HistoryEntry]
	if err := decode(a, &p); err != nil {
		return nil, "", err
	}
	return p.Items, p.Next(), nil
}

func bucketPath(limit, key string) string {
	return "/v1/limits/" + esc(limit) + "/buckets/" + esc(key)
}

func pageQuery(cursor string, n int) url.Values {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if n > 0 {
		q.Set("limit", strconv.Itoa(n))
	}
	return q
}

// decisionOf reads a decision answer: 200/201 accepted (or CanAccept), 429
// denied.
func decisionOf(a answer) (Decision, error) {
	var d api.Decision
	if err := decode(a, &d, http.StatusTooManyRequests); err != nil {
		return Decision{}, err
	}
	return Decision{Decision: d, RateLimitPolicy: a.header.Get("RateLimit-Policy"), RateLimit: a.header.Get("RateLimit")}, nil
}
