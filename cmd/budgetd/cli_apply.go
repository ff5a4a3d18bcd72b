package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/internal/limitsfile"
)

// applyCmd runs budgetd apply -f FILE [--dry-run] [--prune]: it prints the
// plan, then applies it unless --dry-run. A file that does not parse, or
// an override the plan cannot apply, is refused (exit 2) before anything
// is written.
func (c *cli) applyCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("apply", 0, 0); err != nil {
		return err
	}
	if c.file == "" {
		return usageError{"budgetd apply needs -f FILE: the limits file to apply (see budgetd help)"}
	}
	data, err := os.ReadFile(c.file)
	if err != nil {
		return usageError{fmt.Sprintf("-f: %v", err)}
	}
	f, err := limitsfile.Parse(data)
	if err != nil {
		return usageError{fmt.Sprintf("%s: %v", c.file, err)}
	}
	target := clientTarget{cl}
	s, err := limitsfile.Read(ctx, target)
	if err != nil {
		return err
	}
	plan, err := limitsfile.NewPlan(f, s, c.prune, time.Now())
	var fe *limitsfile.Error
	if errors.As(err, &fe) {
		return usageError{fmt.Sprintf("%s: %v", c.file, err)}
	}
	if err != nil {
		return err
	}
	if c.json {
		if err := c.printJSON(map[string]any{"steps": plan.Steps, "dry_run": c.dryRun, "changed": plan.Changed()}); err != nil {
			return err
		}
	} else if err := plan.Write(c.stdout); err != nil {
		return err
	}
	if c.dryRun || !plan.Changed() {
		if c.dryRun && !c.json {
			fmt.Fprintln(c.stdout, "dry run: nothing was written")
		}
		return nil
	}
	if err := plan.Apply(ctx, target); err != nil {
		return err
	}
	if !c.json {
		fmt.Fprintln(c.stdout, "applied")
	}
	return nil
}

// limitsExport runs budgetd limits export: the limits and overrides as a
// limits file (YAML), which budgetd apply -f reads back as no change.
func (c *cli) limitsExport(ctx context.Context, cl *client.Client) error {
	if err := c.want("limits export", 0, 0); err != nil {
		return err
	}
	s, err := limitsfile.Read(ctx, clientTarget{cl})
	if err != nil {
		return err
	}
	b, err := limitsfile.Export(s)
	if err != nil {
		return err
	}
	_, err = c.stdout.Write(b)
	return err
}

// clientTarget is the limitsfile.Target of a budgetd reached over HTTP.
type clientTarget struct{ cl *client.Client }

func (t clientTarget) ListLimits(ctx context.Context) ([]api.Limit, error) {
	return allPages(func(cursor string) ([]api.Limit, string, error) { return t.cl.ListLimits(ctx, cursor, 1000) })
}

func (t clientTarget) ListOverrides(ctx context.Context, limit string) ([]api.Override, error) {
	return allPages(func(cursor string) ([]api.Override, string, error) {
		return t.cl.ListOverrides(ctx, limit, cursor, 1000)
	})
}

// allPages reads a list to its end: page reads the page at a cursor and
// returns the next cursor, "" after the last page.
func allPages[T any](page func(cursor string) ([]T, string, error)) ([]T, error) {
	var out []T
	cursor := ""
	for {
		items, next, err := page(cursor)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

func (t clientTarget) PutLimit(ctx context.Context, l limitsfile.Limit) error {
	_, err := t.cl.PutLimit(ctx, l.Name, specOf(l.Document()))
	return err
}

func (t clientTarget) DeleteLimit(ctx context.Context, name string) error {
	return gone(t.cl.DeleteLimit(ctx, name))
}

func (t clientTarget) PutOverride(ctx context.Context, o limitsfile.Override) error {
	_, err := t.cl.PutOverride(ctx, o.Limit, overrideOf(o.Document()))
	return err
}

func (t clientTarget) DeleteOverride(ctx context.Context, limit, pattern string) error {
	return gone(t.cl.DeleteOverride(ctx, limit, pattern))
}

// gone is err, or nil when it says that what was to be deleted is gone
// already (404).
func gone(err error) error {
	var p *client.Error
	if errors.As(err, &p) && p.Status == http.StatusNotFound && !p.NotBudgetd {
		return nil
	}
	return err
}

// overrideOf is the override document o as the call that writes it back.
func overrideOf(o api.Override) client.Override {
	v := client.Override{Pattern: o.Pattern, Capacity: o.Capacity}
	if o.Leak != nil {
		v.Leak = &client.Leak{Amount: o.Leak.Amount, Per: time.Duration(o.Leak.Per)}
	}
	if o.Period != nil {
		v.TZ = o.Period.TZ
		if o.Period.StartDay != nil {
			v.StartDay = *o.Period.StartDay
		}
	}
	if o.Window != nil {
		v.WindowLength = time.Duration(o.Window.Length)
	}
	if o.ExpiresAt != nil {
		t := o.ExpiresAt.Time
		v.ExpiresAt = &t
	}
	return v
}
