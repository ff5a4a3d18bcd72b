package client

import (
	"context"
	"net/http"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

// Grant is a top-up of one bucket's capacity (docs/terms.md#grants):
// Amount is added to its capacity from CreatedAt until ExpiresAt.
type Grant struct {
	ID        string
	Amount    decimal.Decimal
	CreatedAt time.Time
	ExpiresAt time.Time
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.Grant
}

// Granted is the answer to Grant and RevokeGrant: the grant, the history
// entry written ("" when the limit keeps no history) and the bucket under
// its new terms.
type Granted struct {
	Grant   Grant
	EntryID string
	Bucket  Bucket
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.Granted
}

func grantOfDoc(d api.Grant) Grant {
	return Grant{ID: d.ID, Amount: d.Amount, CreatedAt: d.CreatedAt.Time, ExpiresAt: d.ExpiresAt.Time, Doc: d}
}

func grantsPath(limit, key string) string { return bucketPath(limit, key) + "/grants" }

func (c *Client) granted(ctx context.Context, method, path, key string, body any, o callOpts) (Granted, error) {
	a, err := c.do(ctx, method, path, nil, body, o)
	if err != nil {
		return Granted{}, err
	}
	var d api.Granted
	if err := decode(a, &d); err != nil {
		return Granted{}, err
	}
	return Granted{Grant: grantOfDoc(d.Grant), EntryID: optString(d.EntryID), Bucket: bucketOfDoc(key, d.Bucket), Doc: d}, nil
}

// Grant adds amount to the bucket's capacity until expiresAt (POST
// …/buckets/{key}/grants, admin scope); a zero expiresAt asks for the end
// of the current period of a periodic limit. The IdempotencyKey and Meta
// options apply. On a store that keeps no grants (none of the stores budgetd ships today) it is an
// *Error with Code not_served.
func (c *Client) Grant(ctx context.Context, limit, key string, amount decimal.Decimal, expiresAt time.Time, opts ...CallOption) (Granted, error) {
	if err := checkBucket("", limit, key); err != nil {
		return Granted{}, err
	}
	o := applyOpts(opts)
	if err := checkAmount("amount", amount); err != nil {
		return Granted{}, err
	}
	if err := checkMeta("meta", o.meta); err != nil {
		return Granted{}, err
	}
	req := api.GrantRequest{Amount: amount, Meta: o.meta}
	if !expiresAt.IsZero() {
		t := api.NewTime(expiresAt)
		req.ExpiresAt = &t
	}
	return c.granted(ctx, http.MethodPost, grantsPath(limit, key), key, req, o)
}

// ListGrants returns the bucket's active grants, oldest first.
func (c *Client) ListGrants(ctx context.Context, limit, key string) ([]Grant, error) {
	if err := checkBucket("", limit, key); err != nil {
		return nil, err
	}
	a, err := c.do(ctx, http.MethodGet, grantsPath(limit, key), nil, nil, callOpts{})
	if err != nil {
		return nil, err
	}
	var p api.Page[api.Grant]
	if err := decode(a, &p); err != nil {
		return nil, err
	}
	out := make([]Grant, len(p.Items))
	for i, d := range p.Items {
		out[i] = grantOfDoc(d)
	}
	return out, nil
}

// RevokeGrant revokes the bucket's active grant id (DELETE
// …/grants/{id}, admin scope); none of that id (unknown, revoked or
// expired) is an *Error with Code grant_not_found. The IdempotencyKey and
// Meta options apply.
func (c *Client) RevokeGrant(ctx context.Context, limit, key, id string, opts ...CallOption) (Granted, error) {
	if err := checkBucket("", limit, key); err != nil {
		return Granted{}, err
	}
	o := applyOpts(opts)
	if err := checkMeta("meta", o.meta); err != nil {
		return Granted{}, err
	}
	var body any
	if len(o.meta) > 0 {
		body = struct {
			Meta api.Meta `json:"meta"`
		}{o.meta}
	}
	return c.granted(ctx, http.MethodDelete, grantsPath(limit, key)+"/"+esc(id), key, body, o)
}
