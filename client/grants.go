package client

import (
	"context"
	"net/http"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

func grantsPath(limit, key string) string { return bucketPath(limit, key) + "/grants" }

func (c *Client) granted(ctx context.Context, method, path string, body any, o callOpts) (api.Granted, error) {
	a, err := c.do(ctx, method, path, nil, body, o)
	if err != nil {
		return api.Granted{}, err
	}
	var d api.Granted
	err = decode(a, &d)
	return d, err
}

// Grant adds amount to the bucket's capacity until expiresAt (POST
// …/buckets/{key}/grants, admin scope); a zero expiresAt asks for the end
// of the current period of a periodic limit. The answer is budgetd's
// api.Granted: the grant, the history entry written and the bucket under
// its new terms. The IdempotencyKey and Meta options apply. On a store that keeps no grants (none of the stores budgetd ships today) it is an
// *Error with Code not_served.
func (c *Client) Grant(ctx context.Context, limit, key string, amount decimal.Decimal, expiresAt time.Time, opts ...CallOption) (api.Granted, error) {
	if err := checkBucket("", limit, key); err != nil {
		return api.Granted{}, err
	}
	o := applyOpts(opts)
	if err := checkAmount("amount", amount); err != nil {
		return api.Granted{}, err
	}
	if err := checkMeta("meta", o.meta); err != nil {
		return api.Granted{}, err
	}
	req := api.GrantRequest{Amount: amount, Meta: o.meta}
	if !expiresAt.IsZero() {
		t := api.NewTime(expiresAt)
		req.ExpiresAt = &t
	}
	return c.granted(ctx, http.MethodPost, grantsPath(limit, key), req, o)
}

// ListGrants returns the bucket's active grants, oldest first.
func (c *Client) ListGrants(ctx context.Context, limit, key string) ([]api.Grant, error) {
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
	return p.Items, nil
}

// RevokeGrant revokes the bucket's active grant id (DELETE
// …/grants/{id}, admin scope); none of that id (unknown, revoked or
// expired) is an *Error with Code grant_not_found. The IdempotencyKey and
// Meta options apply.
func (c *Client) RevokeGrant(ctx context.Context, limit, key, id string, opts ...CallOption) (api.Granted, error) {
	if err := checkBucket("", limit, key); err != nil {
		return api.Granted{}, err
	}
	o := applyOpts(opts)
	if err := checkMeta("meta", o.meta); err != nil {
		return api.Granted{}, err
	}
	var body any
	if len(o.meta) > 0 {
		body = struct {
			Meta api.Meta `json:"meta"`
		}{o.meta}
	}
	return c.granted(ctx, http.MethodDelete, grantsPath(limit, key)+"/"+esc(id), body, o)
}
