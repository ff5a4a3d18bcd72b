package client

import (
	"context"
	"net/http"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

// Override is the terms PutOverride writes for one key (an exact Pattern)
// or for every key that starts with a prefix (a Pattern ending in "*"),
// docs/terms.md, with Go durations and times. A nil or zero term comes
// from the limit; set only terms of the limit's own kind. It is written as
// an api.OverridePut; what budgetd answers, and what GetOverride and
// ListOverrides return, is the api.Override.
type Override struct {
	Pattern string
	// Capacity replaces the limit's capacity.
	Capacity *decimal.Decimal
	// Leak replaces a leaky limit's leak rate.
	Leak *Leak
	// TZ and StartDay replace a periodic limit's zone and start day.
	TZ       string
	StartDay int
	// WindowLength replaces a window limit's length (with its default
	// precision).
	WindowLength time.Duration
	// ExpiresAt, when not nil, is when the override stops applying.
	ExpiresAt *time.Time
}

func (o Override) doc() api.OverridePut {
	d := api.OverridePut{Capacity: o.Capacity}
	if o.Leak != nil {
		d.Leak = &api.Leak{Amount: o.Leak.Amount, Per: api.Duration(o.Leak.Per)}
	}
	if o.TZ != "" || o.StartDay != 0 {
		d.Period = &api.OverridePeriod{TZ: o.TZ}
		if o.StartDay != 0 {
			sd := o.StartDay
			d.Period.StartDay = &sd
		}
	}
	if o.WindowLength != 0 {
		d.Window = &api.OverrideWindow{Length: api.Duration(o.WindowLength)}
	}
	if o.ExpiresAt != nil {
		t := api.NewTime(*o.ExpiresAt)
		d.ExpiresAt = &t
	}
	return d
}

func overridePath(limit, pattern string) string {
	return "/v1/limits/" + esc(limit) + "/overrides/" + esc(pattern)
}

// PutOverride creates or replaces the override o.Pattern of the limit (PUT
// /v1/limits/{name}/overrides/{pattern}, admin scope). On a store that
// keeps no overrides it is an *Error with Code not_served.
func (c *Client) PutOverride(ctx context.Context, limit string, o Override) (api.Override, error) {
	a, err := c.do(ctx, http.MethodPut, overridePath(limit, o.Pattern), nil, o.doc(), callOpts{})
	if err != nil {
		return api.Override{}, err
	}
	var d api.Override
	err = decode(a, &d)
	return d, err
}

// GetOverride reads one override; none of that pattern (or an expired
// one) is an *Error with Code override_not_found.
func (c *Client) GetOverride(ctx context.Context, limit, pattern string) (api.Override, error) {
	a, err := c.do(ctx, http.MethodGet, overridePath(limit, pattern), nil, nil, callOpts{})
	if err != nil {
		return api.Override{}, err
	}
	var d api.Override
	err = decode(a, &d)
	return d, err
}

// ListOverrides returns up to n of the limit's unexpired overrides (0: the
// server's default) in byte order of pattern, after the page cursor ("" for
// the first), and the cursor of the next page ("" at the end).
func (c *Client) ListOverrides(ctx context.Context, limit, cursor string, n int) ([]api.Override, string, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/limits/"+esc(limit)+"/overrides", pageQuery(cursor, n), nil, callOpts{})
	if err != nil {
		return nil, "", err
	}
	var p api.Page[api.Override]
	if err := decode(a, &p); err != nil {
		return nil, "", err
	}
	return p.Items, p.Next(), nil
}

// DeleteOverride removes one override (admin scope); the limit's terms, or
// a less specific override's, apply from now on.
func (c *Client) DeleteOverride(ctx context.Context, limit, pattern string) error {
	a, err := c.do(ctx, http.MethodDelete, overridePath(limit, pattern), nil, nil, callOpts{})
	if err != nil {
		return err
	}
	return decode(a, nil)
}
