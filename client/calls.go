package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shopspring/decimal"
)

// PutLimit creates or updates the limit name. Buckets keep their level and
// holds across an update.
func (c *Client) PutLimit(ctx context.Context, name string, spec LimitSpec) (Limit, error) {
	if err := checkAmount("capacity", spec.Capacity); err != nil {
		return Limit{}, err
	}
	if err := checkAmount("leak.amount", spec.Leak.Amount); err != nil {
		return Limit{}, err
	}
	body := map[string]any{
		"capacity": amount(spec.Capacity),
		"leak":     map[string]string{"amount": amount(spec.Leak.Amount), "per": spec.Leak.Per.String()},
	}
	if spec.History != nil {
		body["history"] = *spec.History
	}
	a, err := c.do(ctx, http.MethodPut, "/v1/limits/"+esc(name), nil, body, callOpts{})
	if err != nil {
		return Limit{}, err
	}
	var d limitDoc
	if err := decode(a, &d); err != nil {
		return Limit{}, err
	}
	return d.limit()
}

// GetLimit reads the limit name; an unknown name is an *Error with Code
// limit_not_found.
func (c *Client) GetLimit(ctx context.Context, name string) (Limit, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/limits/"+esc(name), nil, nil, callOpts{})
	if err != nil {
		return Limit{}, err
	}
	var d limitDoc
	if err := decode(a, &d); err != nil {
		return Limit{}, err
	}
	return d.limit()
}

// ListLimits returns up to n limits (0: the server's default) ordered by
// name, after cursor (""; the first page), and the cursor of the next page
// ("" at the end).
func (c *Client) ListLimits(ctx context.Context, cursor string, n int) ([]Limit, string, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/limits", pageQuery(cursor, n), nil, callOpts{})
	if err != nil {
		return nil, "", err
	}
	var p page[limitDoc]
	if err := decode(a, &p); err != nil {
		return nil, "", err
	}
	out := make([]Limit, len(p.Items))
	for i, d := range p.Items {
		if out[i], err = d.limit(); err != nil {
			return nil, "", err
		}
	}
	return out, p.next(), nil
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
func (c *Client) Bucket(ctx context.Context, limit, key string) (Bucket, error) {
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key), nil, nil, callOpts{})
	if err != nil {
		return Bucket{}, err
	}
	var d bucketDoc
	if err := decode(a, &d); err != nil {
		return Bucket{}, err
	}
	b := d.bucket()
	b.Key = key
	return b, nil
}

// ListBuckets returns up to n buckets of limit that the store holds, in
// key order, after cursor, and the next page's cursor ("" at the end).
func (c *Client) ListBuckets(ctx context.Context, limit, cursor string, n int) ([]Bucket, string, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/limits/"+esc(limit)+"/buckets", pageQuery(cursor, n), nil, callOpts{})
	if err != nil {
		return nil, "", err
	}
	var p page[bucketDoc]
	if err := decode(a, &p); err != nil {
		return nil, "", err
	}
	out := make([]Bucket, len(p.Items))
	for i, d := range p.Items {
		out[i] = d.bucket()
	}
	return out, p.next(), nil
}

// CanAccept asks whether a Fillup of cost would be accepted now. It changes
// nothing.
func (c *Client) CanAccept(ctx context.Context, limit, key string, cost decimal.Decimal) (Decision, error) {
	if err := checkAmount("cost", cost); err != nil {
		return Decision{}, err
	}
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key), url.Values{"cost": {amount(cost)}}, nil, callOpts{})
	if err != nil {
		return Decision{}, err
	}
	return decisionOf(a)
}

// Fillup adds cost to the bucket if it fits: an accepted or denied
// Decision, never an error for a denial.
func (c *Client) Fillup(ctx context.Context, limit, key string, cost decimal.Decimal, opts ...CallOption) (Decision, error) {
	if err := checkAmount("cost", cost); err != nil {
		return Decision{}, err
	}
	o := applyOpts(opts)
	body := map[string]any{"cost": amount(cost)}
	if o.meta != nil {
		body["meta"] = o.meta
	}
	a, err := c.do(ctx, http.MethodPost, bucketPath(limit, key)+"/fillup", nil, body, o)
	if err != nil {
		return Decision{}, err
	}
	return decisionOf(a)
}

// FillupMany charges every item or none (per user + per team + global): one
// multi-bucket Fillup of up to 64 items.
func (c *Client) FillupMany(ctx context.Context, items []Item, opts ...CallOption) (MultiDecision, error) {
	for i, it := range items {
		if err := checkAmount("items["+strconv.Itoa(i)+"].cost", it.Cost); err != nil {
			return MultiDecision{}, err
		}
	}
	o := applyOpts(opts)
	docs := make([]map[string]any, len(items))
	for i, it := range items {
		docs[i] = map[string]any{"limit": it.Limit, "key": it.Key, "cost": amount(it.Cost)}
		if o.meta != nil {
			docs[i]["meta"] = o.meta
		}
	}
	a, err := c.do(ctx, http.MethodPost, "/v1/fillup", nil, map[string]any{"items": docs}, o)
	if err != nil {
		return MultiDecision{}, err
	}
	var d struct {
		Accepted bool `json:"accepted"`
		Items    []struct {
			Limit string `json:"limit"`
			Key   string `json:"key"`
			decisionDoc
		} `json:"items"`
	}
	if err := decode(a, &d, http.StatusTooManyRequests); err != nil {
		return MultiDecision{}, err
	}
	out := MultiDecision{Accepted: d.Accepted, Items: make([]ItemDecision, len(d.Items)), RateLimitPolicy: a.header.Get("RateLimit-Policy"), RateLimit: a.header.Get("RateLimit")}
	never := false
	for i, it := range d.Items {
		dec, err := it.decision()
		if err != nil {
			return MultiDecision{}, err
		}
		out.Items[i] = ItemDecision{Limit: it.Limit, Key: it.Key, Decision: dec}
		never = never || dec.NeverFits
		out.RetryAfter = max(out.RetryAfter, dec.RetryAfter)
	}
	if never {
		out.RetryAfter = 0
	}
	return out, nil
}

// Drain lowers the bucket's level by amount (clamped at zero): refunds and
// corrections.
func (c *Client) Drain(ctx context.Context, limit, key string, amt decimal.Decimal, opts ...CallOption) (Drained, error) {
	if err := checkAmount("amount", amt); err != nil {
		return Drained{}, err
	}
	o := applyOpts(opts)
	body := map[string]any{"amount": amount(amt)}
	if o.meta != nil {
		body["meta"] = o.meta
	}
	a, err := c.do(ctx, http.MethodPost, bucketPath(limit, key)+"/drain", nil, body, o)
	if err != nil {
		return Drained{}, err
	}
	var d struct {
		bucketDoc
		Removed decimal.Decimal `json:"removed"`
	}
	if err := decode(a, &d); err != nil {
		return Drained{}, err
	}
	b := d.bucket()
	b.Key = key
	return Drained{Removed: d.Removed, Bucket: b}, nil
}

// Reserve holds amount in the bucket for ttl (0: the server's default, 5m)
// when it fits. When accepted, the hold is returned with the decision; when
// denied, the Reservation is nil.
func (c *Client) Reserve(ctx context.Context, limit, key string, amt decimal.Decimal, ttl time.Duration, opts ...CallOption) (*Reservation, Decision, error) {
	if err := checkAmount("amount", amt); err != nil {
		return nil, Decision{}, err
	}
	o := applyOpts(opts)
	body := map[string]any{"amount": amount(amt)}
	if ttl != 0 {
		body["ttl"] = ttl.String()
	}
	if o.meta != nil {
		body["meta"] = o.meta
	}
	a, err := c.do(ctx, http.MethodPost, bucketPath(limit, key)+"/reservations", nil, body, o)
	if err != nil {
		return nil, Decision{}, err
	}
	dec, err := decisionOf(a)
	if err != nil || !dec.Accepted {
		return nil, dec, err
	}
	var r reservationDoc
	if err := decode(a, &r); err != nil {
		return nil, Decision{}, err
	}
	res := r.reservation()
	return &res, dec, nil
}

// Commit ends the hold id and charges amt (nil: the held amount). A larger
// amount than the hold is refused (exceeds_hold) unless overrun is true.
// Refusals are *Error values: reservation_expired (410),
// reservation_closed (409), exceeds_hold (422).
func (c *Client) Commit(ctx context.Context, id string, amt *decimal.Decimal, overrun bool, opts ...CallOption) (Resolved, error) {
	o := applyOpts(opts)
	body := map[string]any{}
	if amt != nil {
		if err := checkAmount("amount", *amt); err != nil {
			return Resolved{}, err
		}
		body["amount"] = amount(*amt)
	}
	if overrun {
		body["overrun"] = true
	}
	if o.meta != nil {
		body["meta"] = o.meta
	}
	return c.resolve(ctx, id, "commit", body, o)
}

// Release ends the hold id without charging.
func (c *Client) Release(ctx context.Context, id string, opts ...CallOption) (Resolved, error) {
	o := applyOpts(opts)
	body := map[string]any{}
	if o.meta != nil {
		body["meta"] = o.meta
	}
	return c.resolve(ctx, id, "release", body, o)
}

func (c *Client) resolve(ctx context.Context, id, verb string, body map[string]any, o callOpts) (Resolved, error) {
	a, err := c.do(ctx, http.MethodPost, "/v1/reservations/"+esc(id)+"/"+verb, nil, body, o)
	if err != nil {
		return Resolved{}, err
	}
	var d struct {
		reservationDoc
		Level     decimal.Decimal `json:"level"`
		Held      decimal.Decimal `json:"held"`
		Remaining decimal.Decimal `json:"remaining"`
		Capacity  decimal.Decimal `json:"capacity"`
		UpdatedAt *time.Time      `json:"updated_at"`
	}
	if err := decode(a, &d); err != nil {
		return Resolved{}, err
	}
	r := d.reservation()
	return Resolved{Reservation: r, Bucket: Bucket{Key: r.Key, Level: d.Level, Held: d.Held, Remaining: d.Remaining, Capacity: d.Capacity, UpdatedAt: d.UpdatedAt}}, nil
}

// Reservation reads the hold id as it is now.
func (c *Client) Reservation(ctx context.Context, id string) (Reservation, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/reservations/"+esc(id), nil, nil, callOpts{})
	if err != nil {
		return Reservation{}, err
	}
	var d reservationDoc
	if err := decode(a, &d); err != nil {
		return Reservation{}, err
	}
	return d.reservation(), nil
}

// Holds lists the active holds of the bucket (limit, key).
func (c *Client) Holds(ctx context.Context, limit, key string) ([]Reservation, error) {
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key)+"/reservations", nil, nil, callOpts{})
	if err != nil {
		return nil, err
	}
	var p page[reservationDoc]
	if err := decode(a, &p); err != nil {
		return nil, err
	}
	out := make([]Reservation, len(p.Items))
	for i, d := range p.Items {
		out[i] = d.reservation()
	}
	return out, nil
}

// History lists up to n entries of the bucket, newest first, after cursor,
// and the next page's cursor ("" at the end).
func (c *Client) History(ctx context.Context, limit, key, cursor string, n int) ([]Entry, string, error) {
	a, err := c.do(ctx, http.MethodGet, bucketPath(limit, key)+"/history", pageQuery(cursor, n), nil, callOpts{})
	if err != nil {
		return nil, "", err
	}
	var p page[entryDoc]
	if err := decode(a, &p); err != nil {
		return nil, "", err
	}
	out := make([]Entry, len(p.Items))
	for i, d := range p.Items {
		out[i] = Entry(d)
	}
	return out, p.next(), nil
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
	var d decisionDoc
	if err := decode(a, &d, http.StatusTooManyRequests); err != nil {
		return Decision{}, err
	}
	out, err := d.decision()
	if err != nil {
		return Decision{}, err
	}
	out.RateLimitPolicy = a.header.Get("RateLimit-Policy")
	out.RateLimit = a.header.Get("RateLimit")
	return out, nil
}
