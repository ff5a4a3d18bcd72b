package limitsfile

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/budgetd/budgetd/api"
	"github.com/goccy/go-yaml"
)

// exportedLimit is a limit as the file states it: its name and its PUT
// body, every setting written out.
type exportedLimit struct {
	Name string `json:"name"`
	api.LimitPut
}

// exportedOverride is an override as the file states it.
type exportedOverride struct {
	Limit   string `json:"limit"`
	Pattern string `json:"pattern"`
	api.OverridePut
}

// Export writes s as a limits file in YAML (budgetd limits export): its
// limits by name with every setting written out, then their overrides.
// Parsing it and planning it against s plans no change. It has no envoy
// member: the mapping is the file's, budgetd does not store it.
func Export(s State) ([]byte, error) {
	var doc struct {
		Limits    []exportedLimit    `json:"limits"`
		Overrides []exportedOverride `json:"overrides,omitempty"`
	}
	doc.Limits = []exportedLimit{}
	limits := slices.SortedFunc(slices.Values(s.Limits), func(a, b api.Limit) int { return strings.Compare(a.Name, b.Name) })
	for _, l := range limits {
		doc.Limits = append(doc.Limits, exportedLimit{Name: l.Name, LimitPut: putOf(l)})
		for _, o := range s.Overrides[l.Name] {
			doc.Overrides = append(doc.Overrides, exportedOverride{Limit: l.Name, Pattern: o.Pattern, OverridePut: api.OverridePut{
				Capacity: o.Capacity, Leak: o.Leak, Period: o.Period, Window: o.Window, ExpiresAt: o.ExpiresAt,
			}})
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(b)
}

// putOf is the PUT body that writes the limit document l back as it is.
func putOf(l api.Limit) api.LimitPut {
	history, denials := l.History, l.RecordDenials
	p := api.LimitPut{
		Capacity: l.Capacity, Leak: l.Leak, History: &history, RecordDenials: &denials,
		Mode: l.Mode, Grace: l.Grace, Thresholds: l.Thresholds, Rollover: l.Rollover,
	}
	if l.Period != nil {
		p.Period = &api.PeriodPut{Every: l.Period.Every, TZ: l.Period.TZ, StartDay: l.Period.StartDay}
	}
	if l.Window != nil {
		p.Window = &api.WindowPut{Length: l.Window.Length, Precision: l.Window.Precision}
	}
	return p
}
