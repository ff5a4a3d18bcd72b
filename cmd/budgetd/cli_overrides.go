package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
)

// overrides runs budgetd overrides list|get|put|delete (docs/terms.md).
func (c *cli) overrides(ctx context.Context, cl *client.Client) error {
	if len(c.args) == 0 {
		return usageError{"budgetd overrides: list, get, put or delete (see budgetd help)"}
	}
	sub := c.args[0]
	c.args = c.args[1:]
	switch sub {
	case "list":
		if err := c.want("overrides list", 1, 1); err != nil {
			return err
		}
		var all []api.Override
		cursor := c.cursor
		for {
			os, next, err := cl.ListOverrides(ctx, c.args[0], cursor, 1000)
			if err != nil {
				return err
			}
			all = append(all, os...)
			if next == "" {
				break
			}
			cursor = next
		}
		return c.printOverrides(all, false)
	case "get":
		if err := c.want("overrides get", 2, 2); err != nil {
			return err
		}
		o, err := cl.GetOverride(ctx, c.args[0], c.args[1])
		if err != nil {
			return err
		}
		return c.printOverrides([]api.Override{o}, true)
	case "put":
		if err := c.want("overrides put", 2, 2); err != nil {
			return err
		}
		spec, err := c.overrideSpec(c.args[1])
		if err != nil {
			return err
		}
		o, err := cl.PutOverride(ctx, c.args[0], spec)
		if err != nil {
			return err
		}
		return c.printOverrides([]api.Override{o}, true)
	case "delete":
		if err := c.want("overrides delete", 2, 2); err != nil {
			return err
		}
		if err := cl.DeleteOverride(ctx, c.args[0], c.args[1]); err != nil {
			return err
		}
		if c.json {
			return c.printJSON(map[string]any{"deleted": c.args[1]})
		}
		fmt.Fprintf(c.stdout, "deleted override %s of %s\n", c.args[1], c.args[0])
		return nil
	}
	return usageError{fmt.Sprintf("budgetd overrides: unknown subcommand %q", sub)}
}

// overrideSpec reads the terms of budgetd overrides put from the flags.
func (c *cli) overrideSpec(pattern string) (client.Override, error) {
	o := client.Override{Pattern: pattern, TZ: c.tz, StartDay: c.startDay, WindowLength: c.window}
	if c.capacity != "" {
		capacity, err := parseAmount("--capacity", c.capacity)
		if err != nil {
			return o, err
		}
		o.Capacity = &capacity
	}
	if c.leak != "" {
		amt, per, ok := strings.Cut(c.leak, "/")
		if !ok {
			return o, usageError{fmt.Sprintf("--leak %q is not AMOUNT/PER (e.g. 10/1s)", c.leak)}
		}
		amount, err := parseAmount("--leak amount", amt)
		if err != nil {
			return o, err
		}
		d, err := time.ParseDuration(per)
		if err != nil {
			return o, usageError{fmt.Sprintf("--leak: %q is not a duration like 1s or 720h", per)}
		}
		o.Leak = &client.Leak{Amount: amount, Per: d}
	}
	if c.expiresAt != "" {
		t, err := c.expiry()
		if err != nil {
			return o, err
		}
		o.ExpiresAt = &t
	}
	if o.Capacity == nil && o.Leak == nil && o.TZ == "" && o.StartDay == 0 && o.WindowLength == 0 {
		return o, usageError{"budgetd overrides put LIMIT PATTERN needs at least one of --capacity, --leak, --tz, --start-day or --window"}
	}
	return o, nil
}

// printOverrides prints overrides as a table, or with --json budgetd's
// document of one override (get, put) or its page of them (list, every page
// read).
func (c *cli) printOverrides(os []api.Override, one bool) error {
	if c.json {
		if one {
			return c.printJSON(os[0])
		}
		return c.printJSON(api.Page[api.Override]{Items: nonNil(os)})
	}
	rows := make([][]string, len(os))
	for i, o := range os {
		capacity, leak, period, window, until := "-", "-", "-", "-", "never"
		if o.Capacity != nil {
			capacity = o.Capacity.String()
		}
		if o.Leak != nil {
			leak = o.Leak.Amount.String() + "/" + o.Leak.Per.String()
		}
		if p := o.Period; p != nil {
			period = p.TZ
			if p.StartDay != nil {
				period = strings.TrimSpace(p.TZ + " day " + itoa(*p.StartDay))
			}
		}
		if o.Window != nil {
			window = o.Window.Length.String()
		}
		if o.ExpiresAt != nil {
			until = o.ExpiresAt.String()
		}
		rows[i] = []string{o.Pattern, capacity, leak, period, window, until}
	}
	c.table("PATTERN\tCAPACITY\tLEAK\tPERIOD\tWINDOW\tUNTIL", rows)
	return nil
}
