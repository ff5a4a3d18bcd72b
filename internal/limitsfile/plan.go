package limitsfile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/budgetd/budgetd/api"
	bhttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// Target is a budgetd whose limits and overrides a plan reads and writes:
// the HTTP client (budgetd apply) or the ledger service (budgetd
// --limits-file). Reads answer as the API shows limits and overrides.
// Deleting what is already gone is not an error (another apply, on another
// instance, may have deleted it first). Errors are the Target's own (a
// *client.Problem, a ledger error); none is retried by the plan.
type Target interface {
	// ListLimits returns every limit.
	ListLimits(ctx context.Context) ([]api.Limit, error)
	// ListOverrides returns every active override of the limit name.
	ListOverrides(ctx context.Context, limit string) ([]api.Override, error)
	// PutLimit creates or replaces the limit l.Name.
	PutLimit(ctx context.Context, l Limit) error
	// DeleteLimit deletes the limit name, its buckets and overrides.
	DeleteLimit(ctx context.Context, name string) error
	// PutOverride creates or replaces the override o.Override.Pattern of
	// the limit o.Limit.
	PutOverride(ctx context.Context, o Override) error
	// DeleteOverride deletes one override.
	DeleteOverride(ctx context.Context, limit, pattern string) error
}

// State is what a budgetd holds: its limits and, by limit name, their
// overrides.
type State struct {
	Limits    []api.Limit
	Overrides map[string][]api.Override
}

// Read reads the state of t.
func Read(ctx context.Context, t Target) (State, error) {
	ls, err := t.ListLimits(ctx)
	if err != nil {
		return State{}, fmt.Errorf("listing limits: %w", err)
	}
	s := State{Limits: ls, Overrides: map[string][]api.Override{}}
	for _, l := range ls {
		os, err := t.ListOverrides(ctx, l.Name)
		if err != nil {
			return State{}, fmt.Errorf("listing the overrides of %s: %w", l.Name, err)
		}
		if len(os) > 0 {
			s.Overrides[l.Name] = os
		}
	}
	return s, nil
}

// Action is what a plan does to one limit or override.
type Action string

// The actions of a plan.
const (
	// Create: the file has it, the budgetd does not.
	Create Action = "create"
	// Change: both have it, with different fields.
	Change Action = "change"
	// Delete: the budgetd has it and the file does not (only with prune).
	Delete Action = "delete"
	// Unchanged: both have it, the same.
	Unchanged Action = "unchanged"
)

// FieldChange is one field of a limit or override that a step changes, by
// its path in the API's document (period.tz, thresholds[0]); Old or New is
// "" where the field is absent or null.
type FieldChange struct {
	Field string `json:"field"`
	Old   string `json:"old"`
	New   string `json:"new"`
}

// Step is what a plan does to one limit (Pattern "") or one override.
type Step struct {
	Action  Action `json:"action"`
	Limit   string `json:"limit"`
	Pattern string `json:"pattern,omitempty"`
	// Changes are the fields that Change changes, and those that Create
	// sets; none for Delete and Unchanged.
	Changes []FieldChange `json:"changes,omitempty"`

	limit    *Limit
	override *Override
}

// Plan is what it takes to bring a budgetd to the state a file states.
type Plan struct {
	// Steps are the limits' steps (the file's order, then deletions by
	// name), then the overrides' steps.
	Steps []Step `json:"steps"`
}

// NewPlan compares f with the state s at now (the budgetd's clock, for
// overrides' expiries) and plans every limit and override of f: create,
// change or unchanged; with prune it also deletes the limits and overrides
// s holds and f does not name (a limit that one of f's overrides is for
// counts as named). Without prune nothing is deleted. A field that f leaves
// out compares equal to the default the server fills in, and amounts
// compare as numbers (5000.00 is 5000). An override that does not fit its
// limit, whether f's or the budgetd's, whose limit is in neither, or whose
// expiry is not after now, refuses the plan with an *Error.
func NewPlan(f *File, s State, prune bool, now time.Time) (*Plan, error) {
	current := map[string]api.Limit{}
	for _, l := range s.Limits {
		current[l.Name] = l
	}
	if err := checkOverrides(f, current, now); err != nil {
		return nil, err
	}
	p := &Plan{}
	named := map[string]bool{}
	for i := range f.Limits {
		l := &f.Limits[i]
		named[l.Name] = true
		step := Step{Limit: l.Name, limit: l}
		was, ok := current[l.Name]
		step.Action, step.Changes = compare(ok, limitFields(was), limitFields(l.Document()))
		p.Steps = append(p.Steps, step)
	}
	for _, o := range f.Overrides {
		named[o.Limit] = true
	}
	if prune {
		for _, name := range slices.Sorted(maps.Keys(current)) {
			if !named[name] {
				p.Steps = append(p.Steps, Step{Action: Delete, Limit: name})
			}
		}
	}
	wanted := map[[2]string]bool{}
	for i := range f.Overrides {
		o := &f.Overrides[i]
		wanted[[2]string{o.Limit, o.Override.Pattern}] = true
		step := Step{Limit: o.Limit, Pattern: o.Override.Pattern, override: o}
		var was api.Override
		ok := false
		for _, c := range s.Overrides[o.Limit] {
			if c.Pattern == o.Override.Pattern {
				was, ok = c, true
			}
		}
		step.Action, step.Changes = compare(ok, overrideFields(was), overrideFields(o.Document()))
		p.Steps = append(p.Steps, step)
	}
	if prune {
		for _, name := range slices.Sorted(maps.Keys(s.Overrides)) {
			if !named[name] {
				continue // deleted with its limit
			}
			for _, c := range s.Overrides[name] {
				if !wanted[[2]string{name, c.Pattern}] {
					p.Steps = append(p.Steps, Step{Action: Delete, Limit: name, Pattern: c.Pattern})
				}
			}
		}
	}
	return p, nil
}

// checkOverrides checks each override of f against its limit, f's or the
// budgetd's, at now.
func checkOverrides(f *File, current map[string]api.Limit, now time.Time) error {
	for i, o := range f.Overrides {
		path := fmt.Sprintf("overrides[%d]", i)
		l, ok := f.lookup(o.Limit)
		if !ok {
			doc, there := current[o.Limit]
			if !there {
				return &Error{Line: o.Line, Field: path + ".limit", Code: ledger.CodeInvalidRequest, Reason: fmt.Sprintf("no limit %q, in the file or in budgetd", o.Limit)}
			}
			var err error
			if l, err = fromDocument(doc); err != nil {
				return &Error{Line: o.Line, Field: path + ".limit", Reason: fmt.Sprintf("budgetd's limit %q does not read back: %v", o.Limit, err)}
			}
		}
		if err := ledger.ValidateOverride(l.Limit, o.Override, now); err != nil {
			e := &Error{Line: o.Line, Field: path, Reason: err.Error()}
			if ie, ok := err.(*ledger.InvalidError); ok {
				e.Field, e.Code, e.Reason = path+"."+ie.Field, ie.Code, ie.Reason
			}
			return e
		}
	}
	return nil
}

// fromDocument reads a limit document back as the file would hold it
// (the API takes a document it showed as a PUT body).
func fromDocument(doc api.Limit) (Limit, error) {
	body, err := json.Marshal(doc)
	if err != nil {
		return Limit{}, err
	}
	spec, err := bhttp.ParseLimit(doc.Name, body)
	if err != nil {
		return Limit{}, err
	}
	l, err := ledger.CheckLimit(doc.Name, spec)
	return Limit{Name: doc.Name, Spec: spec, Limit: l}, err
}

// compare is the action and the changed fields from the fields was
// (present when exists) to want.
func compare(exists bool, was, want map[string]string) (Action, []FieldChange) {
	var changes []FieldChange
	for _, k := range slices.Sorted(maps.Keys(joinKeys(was, want))) {
		if !exists {
			changes = append(changes, FieldChange{Field: k, New: want[k]})
		} else if !sameValue(was[k], want[k]) {
			changes = append(changes, FieldChange{Field: k, Old: was[k], New: want[k]})
		}
	}
	switch {
	case !exists:
		return Create, changes
	case len(changes) > 0:
		return Change, changes
	}
	return Unchanged, nil
}

// joinKeys is the set of keys of a and b.
func joinKeys(a, b map[string]string) map[string]bool {
	k := map[string]bool{}
	for x := range a {
		k[x] = true
	}
	for x := range b {
		k[x] = true
	}
	return k
}

// sameValue compares two fields' values: the same text, or the same
// number (an amount "5000.00" and "5000", a percentage "10%" and "10.00%").
func sameValue(a, b string) bool {
	if a == b {
		return true
	}
	ap, bp := strings.HasSuffix(a, "%"), strings.HasSuffix(b, "%")
	if ap != bp {
		return false
	}
	x, err1 := decimal.NewFromString(strings.TrimSuffix(a, "%"))
	y, err2 := decimal.NewFromString(strings.TrimSuffix(b, "%"))
	return err1 == nil && err2 == nil && x.Equal(y)
}

// limitFields flattens a limit document into its fields, without its
// name and times.
func limitFields(l api.Limit) map[string]string {
	if l.Name == "" && l.Capacity.IsZero() {
		return nil
	}
	return fields(l, "name", "created_at", "updated_at")
}

// overrideFields flattens an override document into its fields, without
// its pattern and times.
func overrideFields(o api.Override) map[string]string {
	if o.Pattern == "" {
		return nil
	}
	return fields(o, "pattern", "created_at", "updated_at")
}

// fields flattens the JSON of v into path → value, leaving out the
// top-level members skip, nulls and empty lists.
func fields(v any, skip ...string) map[string]string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the api documents always marshal
	}
	var tree map[string]any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		panic(err)
	}
	for _, k := range skip {
		delete(tree, k)
	}
	out := map[string]string{}
	flatten(out, "", tree)
	return out
}

// flatten writes the leaves of v, found at path, into out.
func flatten(out map[string]string, path string, v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			at := k
			if path != "" {
				at = path + "." + k
			}
			flatten(out, at, x)
		}
	case []any:
		for i, x := range v {
			flatten(out, fmt.Sprintf("%s[%d]", path, i), x)
		}
	case nil:
	default:
		out[path] = fmt.Sprint(v)
	}
}

// Changed reports whether applying p would write anything.
func (p *Plan) Changed() bool {
	for _, s := range p.Steps {
		if s.Action != Unchanged {
			return true
		}
	}
	return false
}

// Count is how many steps of p do a.
func (p *Plan) Count(a Action) int {
	n := 0
	for _, s := range p.Steps {
		if s.Action == a {
			n++
		}
	}
	return n
}

// Apply carries out p on t: limits created and changed first, then
// overrides put, then overrides deleted, then limits deleted. It stops at
// the first error, which says the step; the steps before it stay applied
// (applying the file again finishes the work).
func (p *Plan) Apply(ctx context.Context, t Target) error {
	for pass := range 4 {
		for _, s := range p.Steps {
			var err error
			switch {
			case pass == 0 && s.limit != nil && (s.Action == Create || s.Action == Change):
				err = t.PutLimit(ctx, *s.limit)
			case pass == 1 && s.override != nil && (s.Action == Create || s.Action == Change):
				err = t.PutOverride(ctx, *s.override)
			case pass == 2 && s.Pattern != "" && s.Action == Delete:
				err = t.DeleteOverride(ctx, s.Limit, s.Pattern)
			case pass == 3 && s.Pattern == "" && s.Action == Delete:
				err = t.DeleteLimit(ctx, s.Limit)
			default:
				continue
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", s.Action, s.what(), err)
			}
		}
	}
	return nil
}

// what names the step's limit or override.
func (s Step) what() string {
	if s.Pattern != "" {
		return fmt.Sprintf("override %s of limit %s", s.Pattern, s.Limit)
	}
	return "limit " + s.Limit
}

// Write writes p for people: a line per limit and override with its
// action, a line per field it sets or changes (old → new), and a summary.
func (p *Plan) Write(w io.Writer) error {
	var b strings.Builder
	for _, s := range p.Steps {
		fmt.Fprintf(&b, "%s: %s\n", s.what(), s.Action)
		for _, c := range s.Changes {
			switch {
			case s.Action == Create:
				fmt.Fprintf(&b, "    %s: %s\n", c.Field, c.New)
			default:
				fmt.Fprintf(&b, "    %s: %s → %s\n", c.Field, orNone(c.Old), orNone(c.New))
			}
		}
	}
	if !p.Changed() {
		fmt.Fprintf(&b, "no changes (%d unchanged)\n", p.Count(Unchanged))
	} else {
		fmt.Fprintf(&b, "plan: %d to create, %d to change, %d to delete, %d unchanged\n", p.Count(Create), p.Count(Change), p.Count(Delete), p.Count(Unchanged))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// orNone is v, or (none) for an absent field.
func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}
