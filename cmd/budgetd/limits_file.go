package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/limitsfile"
)

// readLimitsFile reads and parses the --limits-file: a file that cannot be
// read or does not parse stops the start, before the store is opened.
func readLimitsFile(name string) (*limitsfile.File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--limits-file: %v", err)}
	}
	f, err := limitsfile.Parse(data)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--limits-file %s: %v", name, err)}
	}
	return f, nil
}

// applyAttempts bounds how often the start plans and applies the limits
// file again when applying fails (another instance changing the same
// limits at the same moment, a store failing over).
const applyAttempts = 3

// applyLimits applies the --limits-file through the service, before
// serving, and logs what it changed. It never prunes. Several instances
// starting together on one store converge: each PUT creates or replaces,
// so whichever writes first, the state is the file's; a failed apply is
// planned again from what the store then holds.
func (d *daemon) applyLimits(ctx context.Context) error {
	if d.limits == nil {
		return nil
	}
	target := limitsfile.Service(d.svc)
	var err error
	for range applyAttempts {
		var plan *limitsfile.Plan
		plan, err = planLimits(ctx, target, d.limits)
		var fe *limitsfile.Error
		if errors.As(err, &fe) {
			return usageError{fmt.Sprintf("--limits-file %s: %v", d.cfg.limitsFile, err)}
		}
		if err == nil {
			if err = plan.Apply(ctx, target); err == nil {
				d.logPlan(plan)
				return nil
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("--limits-file %s: %w", d.cfg.limitsFile, err)
}

// planLimits reads the state of t and plans f against it (no prune).
func planLimits(ctx context.Context, t limitsfile.Target, f *limitsfile.File) (*limitsfile.Plan, error) {
	s, err := limitsfile.Read(ctx, t)
	if err != nil {
		return nil, err
	}
	return limitsfile.NewPlan(f, s, false, time.Now())
}

// logPlan logs what applying the limits file did: a line in all, and one
// per limit or override it created or changed.
func (d *daemon) logPlan(p *limitsfile.Plan) {
	d.log.Info("limits file applied", "file", d.cfg.limitsFile,
		"created", p.Count(limitsfile.Create), "changed", p.Count(limitsfile.Change), "unchanged", p.Count(limitsfile.Unchanged))
	for _, s := range p.Steps {
		if s.Action == limitsfile.Unchanged {
			continue
		}
		var fields []string
		for _, c := range s.Changes {
			fields = append(fields, c.Field)
		}
		d.log.Info("limits file: "+string(s.Action), "limit", s.Limit, "pattern", s.Pattern, "fields", strings.Join(fields, ","))
	}
}
