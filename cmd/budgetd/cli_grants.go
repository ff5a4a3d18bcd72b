package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
)

// grants runs budgetd grants add|list|revoke (docs/terms.md#grants).
func (c *cli) grants(ctx context.Context, cl *client.Client) error {
	if len(c.args) == 0 {
		return usageError{"budgetd grants: add, list or revoke (see budgetd help)"}
	}
	sub := c.args[0]
	c.args = c.args[1:]
	switch sub {
	case "list":
		if err := c.want("grants list", 2, 2); err != nil {
			return err
		}
		gs, err := cl.ListGrants(ctx, c.args[0], c.args[1])
		if err != nil {
			return err
		}
		return c.printGrants(gs)
	case "add":
		if err := c.want("grants add", 3, 3); err != nil {
			return err
		}
		amount, err := parseAmount("AMOUNT", c.args[2])
		if err != nil {
			return err
		}
		var until time.Time
		if c.expiresAt != "" {
			if until, err = c.expiry(); err != nil {
				return err
			}
		}
		g, err := cl.Grant(ctx, c.args[0], c.args[1], amount, until, c.callOptions()...)
		if err != nil {
			return err
		}
		return c.printGranted(g)
	case "revoke":
		if err := c.want("grants revoke", 3, 3); err != nil {
			return err
		}
		g, err := cl.RevokeGrant(ctx, c.args[0], c.args[1], c.args[2], c.callOptions()...)
		if err != nil {
			return err
		}
		return c.printGranted(g)
	}
	return usageError{fmt.Sprintf("budgetd grants: unknown subcommand %q", sub)}
}

// printGrants prints grants as a table, or with --json budgetd's page of
// them (every grant is on one page).
func (c *cli) printGrants(gs []api.Grant) error {
	if c.json {
		return c.printJSON(api.Page[api.Grant]{Items: nonNil(gs)})
	}
	rows := make([][]string, len(gs))
	for i, g := range gs {
		rows[i] = []string{g.ID, g.Amount.String(), g.CreatedAt.String(), g.ExpiresAt.String()}
	}
	c.table("ID\tAMOUNT\tCREATED\tUNTIL", rows)
	return nil
}

// printGranted prints a grant or a revocation with the bucket's capacity
// after it; with -q only the grant's id, for
// grant=$(budgetd grants add … -q).
func (c *cli) printGranted(g api.Granted) error {
	switch {
	case c.quiet:
		_, err := fmt.Fprintln(c.stdout, g.Grant.ID)
		return err
	case c.json:
		return c.printJSON(g)
	}
	c.table("ID\tAMOUNT\tUNTIL\tCAPACITY\tGRANTS", [][]string{{g.Grant.ID, g.Grant.Amount.String(), g.Grant.ExpiresAt.String(), g.Bucket.Capacity.String(), g.Bucket.Grants.String()}})
	return nil
}

// expiry reads --expires-at: an RFC 3339 time, or +DURATION from now (a Go
// duration such as +72h, so that an example stays valid whenever it runs).
func (c *cli) expiry() (time.Time, error) {
	if d, ok := strings.CutPrefix(c.expiresAt, "+"); ok {
		v, err := time.ParseDuration(d)
		if err != nil || v <= 0 {
			return time.Time{}, usageError{fmt.Sprintf("--expires-at %q is not +DURATION like +72h", c.expiresAt)}
		}
		return time.Now().Add(v).Truncate(time.Microsecond), nil
	}
	t, err := time.Parse(time.RFC3339Nano, c.expiresAt)
	if err != nil {
		return time.Time{}, usageError{fmt.Sprintf("--expires-at %q is not an RFC 3339 time like 2026-12-04T00:00:00Z or +DURATION like +72h", c.expiresAt)}
	}
	return t, nil
}
